//! Prices and cost: a built-in table for common OpenAI and Anthropic models, overridden by
//! the config's `prices`. A model with no price has an unknown cost, never a zero one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::types::Usage;
use crate::config::Price;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input read from the cache.
    pub cached_input: f64,
    /// Input written to the cache.
    pub cache_write: f64,
}

/// (provider, model, input, cached input, output); Anthropic's cache writes cost 1.25× input.
/// Published list prices, USD per million tokens.
const BUILT_IN: &[(&str, &str, f64, f64, f64)] = &[
    ("openai", "gpt-5", 1.25, 0.125, 10.0),
    ("openai", "gpt-5-mini", 0.25, 0.025, 2.0),
    ("openai", "gpt-5-nano", 0.05, 0.005, 0.40),
    ("openai", "gpt-4.1", 2.0, 0.50, 8.0),
    ("openai", "gpt-4.1-mini", 0.40, 0.10, 1.60),
    ("openai", "gpt-4.1-nano", 0.10, 0.025, 0.40),
    ("openai", "gpt-4o", 2.50, 1.25, 10.0),
    ("openai", "gpt-4o-mini", 0.15, 0.075, 0.60),
    ("openai", "o3", 2.0, 0.50, 8.0),
    ("openai", "o3-mini", 1.10, 0.55, 4.40),
    ("openai", "o4-mini", 1.10, 0.275, 4.40),
    ("openai", "o1", 15.0, 7.50, 60.0),
    ("anthropic", "claude-opus-4-5", 5.0, 0.50, 25.0),
    ("anthropic", "claude-opus-4-1", 15.0, 1.50, 75.0),
    ("anthropic", "claude-opus-4", 15.0, 1.50, 75.0),
    ("anthropic", "claude-sonnet-4-5", 3.0, 0.30, 15.0),
    ("anthropic", "claude-sonnet-4", 3.0, 0.30, 15.0),
    ("anthropic", "claude-3-7-sonnet", 3.0, 0.30, 15.0),
    ("anthropic", "claude-haiku-4-5", 1.0, 0.10, 5.0),
    ("anthropic", "claude-3-5-haiku", 0.80, 0.08, 4.0),
];

/// The price table in force for a run.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    overrides: BTreeMap<String, Price>,
}

impl PriceTable {
    /// Built-in prices overridden by `overrides` (keyed `PROVIDER:MODEL` or bare model name).
    pub fn new(overrides: BTreeMap<String, Price>) -> Self {
        Self { overrides }
    }

    /// Rates of `model` at `provider`, if known.
    pub fn rates(&self, provider: &str, model: &str) -> Option<Rates> {
        let full = format!("{provider}:{model}");
        if let Some(p) = self
            .overrides
            .get(&full)
            .or_else(|| self.overrides.get(model))
        {
            return Some(Rates {
                input: p.input,
                output: p.output,
                cached_input: p.cached_input.unwrap_or(p.input),
                cache_write: if provider == "anthropic" {
                    p.input * 1.25
                } else {
                    p.input
                },
            });
        }
        let base = normalize(model);
        BUILT_IN
            .iter()
            .find(|(p, m, ..)| *p == provider && *m == base)
            .map(|&(p, _, input, cached, output)| Rates {
                input,
                output,
                cached_input: cached,
                cache_write: if p == "anthropic" {
                    input * 1.25
                } else {
                    input
                },
            })
    }

    /// USD cost of one call, `None` when the model has no price.
    pub fn cost(&self, provider: &str, model: &str, usage: &Usage) -> Option<f64> {
        let r = self.rates(provider, model)?;
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let written = usage.cache_write_tokens.min(usage.input_tokens - cached);
        let plain = usage.input_tokens - cached - written;
        Some(
            (plain as f64 * r.input
                + cached as f64 * r.cached_input
                + written as f64 * r.cache_write
                + usage.output_tokens as f64 * r.output)
                / 1e6,
        )
    }

    /// The most one call can cost: every prompt token at the dearer of the input and
    /// cache-write rates, plus `max_output` output tokens. `None` when the model has no price.
    pub fn worst_case(
        &self,
        provider: &str,
        model: &str,
        prompt_tokens: u64,
        max_output: u64,
    ) -> Option<f64> {
        let r = self.rates(provider, model)?;
        Some(
            (prompt_tokens as f64 * r.input.max(r.cache_write) + max_output as f64 * r.output)
                / 1e6,
        )
    }
}

/// `openai/gpt-4o-2024-08-06` → `gpt-4o`; `claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`.
fn normalize(model: &str) -> &str {
    let m = model.rsplit('/').next().unwrap_or(model);
    let m = m.strip_suffix("-latest").unwrap_or(m);
    let b = m.as_bytes();
    // -YYYYMMDD
    if b.len() > 9 && b[b.len() - 9] == b'-' && b[b.len() - 8..].iter().all(u8::is_ascii_digit) {
        return &m[..m.len() - 9];
    }
    // -YYYY-MM-DD
    if b.len() > 11 {
        let tail = &b[b.len() - 11..];
        let digits = [1, 2, 3, 4, 6, 7, 9, 10];
        if tail[0] == b'-'
            && tail[5] == b'-'
            && tail[8] == b'-'
            && digits.iter().all(|&i| tail[i].is_ascii_digit())
        {
            return &m[..m.len() - 11];
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_models_have_prices_and_dated_names_match() {
        let t = PriceTable::default();
        let u = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
            ..Usage::default()
        };
        assert_eq!(t.cost("openai", "gpt-4o-mini", &u), Some(0.75));
        assert_eq!(t.cost("openai", "gpt-4o-2024-08-06", &u), Some(12.5));
        assert_eq!(
            t.cost("anthropic", "claude-sonnet-4-5-20250929", &u),
            Some(18.0)
        );
        assert_eq!(t.cost("openai", "openai/gpt-4o-mini", &u), Some(0.75));
    }

    #[test]
    fn unknown_model_cost_is_unknown_not_zero() {
        let t = PriceTable::default();
        assert_eq!(t.cost("openai", "smollm2", &Usage::default()), None);
        assert_eq!(t.cost("ollama", "gpt-4o", &Usage::default()), None);
        assert_eq!(t.worst_case("openai", "smollm2", 10, 10), None);
    }

    #[test]
    fn config_overrides_win_and_caching_is_priced() {
        let mut o = BTreeMap::new();
        o.insert(
            "openai:gpt-4o".to_string(),
            Price {
                input: 1.0,
                output: 2.0,
                cached_input: Some(0.5),
            },
        );
        o.insert(
            "local-model".to_string(),
            Price {
                input: 0.0,
                output: 0.0,
                cached_input: None,
            },
        );
        let t = PriceTable::new(o);
        let u = Usage {
            input_tokens: 2_000_000,
            output_tokens: 1_000_000,
            cached_input_tokens: 1_000_000,
            ..Usage::default()
        };
        assert_eq!(t.cost("openai", "gpt-4o", &u), Some(1.0 + 0.5 + 2.0));
        assert_eq!(t.cost("ollama", "local-model", &u), Some(0.0));
        // Anthropic: 1M read from cache at 0.30, 1M written at 3.75, 1M plain at 3.00.
        let t = PriceTable::default();
        let u = Usage {
            input_tokens: 3_000_000,
            output_tokens: 0,
            cached_input_tokens: 1_000_000,
            cache_write_tokens: 1_000_000,
            estimated: false,
        };
        let c = t.cost("anthropic", "claude-sonnet-4-5", &u).unwrap();
        assert!((c - 7.05).abs() < 1e-9, "{c}");
        let w = t
            .worst_case("anthropic", "claude-sonnet-4-5", 1_000_000, 1_000_000)
            .unwrap();
        assert!((w - 18.75).abs() < 1e-9, "{w}");
    }
}
