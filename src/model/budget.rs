//! Hard budgets: `max_usd`, `max_tokens`, `max_turns`, `max_minutes`, checked before every
//! call against that call's worst case (estimated prompt + `max_tokens` of output). The worst
//! case is reserved while the call runs, so concurrent calls cannot overspend together.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::config::BudgetConfig;

/// Which limit was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `max_usd`.
    MaxUsd,
    /// `max_tokens`.
    MaxTokens,
    /// `max_turns`.
    MaxTurns,
    /// `max_minutes`.
    MaxMinutes,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::MaxUsd => "max_usd",
            Limit::MaxTokens => "max_tokens",
            Limit::MaxTurns => "max_turns",
            Limit::MaxMinutes => "max_minutes",
        })
    }
}

/// What a run has spent on models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// USD of calls whose price is known.
    pub usd: f64,
    /// Calls whose price is unknown (their USD is not in `usd`).
    pub unpriced_calls: u32,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
    /// Prompt tokens read from a cache.
    pub tokens_cached: u64,
    /// Completed model calls.
    pub turns: u32,
}

/// A budget stopped the next call. The run ends in `budget_exhausted` with `spent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exhausted {
    /// The limit.
    pub limit: Limit,
    /// Its configured value.
    pub max: f64,
    /// What the next call could have added (USD, tokens, 1 turn, or elapsed minutes).
    pub needed: f64,
    /// Spend so far.
    pub spent: Spend,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.spent;
        match self.limit {
            Limit::MaxUsd => write!(
                f,
                "budget exhausted: max_usd {:.2} would be exceeded (spent ${:.4}, the next call may cost up to ${:.4})",
                self.max, s.usd, self.needed
            )?,
            Limit::MaxTokens => write!(
                f,
                "budget exhausted: max_tokens {} would be exceeded (spent {} tokens, the next call may use up to {})",
                self.max,
                s.tokens_in + s.tokens_out,
                self.needed
            )?,
            Limit::MaxTurns => write!(
                f,
                "budget exhausted: max_turns {} reached ({} model calls made)",
                self.max, s.turns
            )?,
            Limit::MaxMinutes => write!(
                f,
                "budget exhausted: max_minutes {} reached ({:.1} minutes elapsed)",
                self.max, self.needed
            )?,
        }
        write!(
            f,
            "; spent so far: ${:.4}, {} tokens in, {} out, {} calls",
            s.usd, s.tokens_in, s.tokens_out, s.turns
        )
    }
}

/// The worst case of one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorstCase {
    /// USD, `None` when the model has no price.
    pub usd: Option<f64>,
    /// Prompt estimate plus `max_tokens`.
    pub tokens: u64,
}

/// A reservation held while a call runs; hand it back to [`Budget::settle`] or
/// [`Budget::release`].
#[derive(Debug)]
#[must_use = "a reservation must be settled or released"]
pub struct Reservation {
    usd: f64,
    tokens: u64,
}

/// The running budget of one run.
#[derive(Debug, Clone)]
pub struct Budget {
    limits: BudgetConfig,
    spent: Spend,
    reserved_usd: f64,
    reserved_tokens: u64,
    reserved_turns: u32,
    started: Instant,
}

impl Budget {
    /// A fresh budget whose clock starts now.
    pub fn new(limits: &BudgetConfig) -> Self {
        Self::resumed(limits, Spend::default(), Duration::ZERO)
    }

    /// A budget for a resumed run that already spent `spent` over `elapsed`.
    pub fn resumed(limits: &BudgetConfig, spent: Spend, elapsed: Duration) -> Self {
        let now = Instant::now();
        Self {
            limits: limits.clone(),
            spent,
            reserved_usd: 0.0,
            reserved_tokens: 0,
            reserved_turns: 0,
            started: now.checked_sub(elapsed).unwrap_or(now),
        }
    }

    /// Spend so far.
    pub fn spent(&self) -> Spend {
        self.spent
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// When `max_minutes` runs out.
    pub fn deadline(&self) -> Instant {
        self.started + Duration::from_secs(u64::from(self.limits.max_minutes) * 60)
    }

    fn exhausted(&self, limit: Limit, max: f64, needed: f64) -> Box<Exhausted> {
        Box::new(Exhausted {
            limit,
            max,
            needed,
            spent: self.spent,
        })
    }

    /// Whether `max_minutes` has run out.
    pub fn check_time(&self) -> Result<(), Box<Exhausted>> {
        let elapsed = self.elapsed();
        let max = self.limits.max_minutes;
        if elapsed >= Duration::from_secs(u64::from(max) * 60) {
            return Err(self.exhausted(
                Limit::MaxMinutes,
                f64::from(max),
                elapsed.as_secs_f64() / 60.0,
            ));
        }
        Ok(())
    }

    /// Check the next call against every limit and reserve its worst case.
    pub fn reserve(&mut self, worst: WorstCase) -> Result<Reservation, Box<Exhausted>> {
        self.check_time()?;
        let l = &self.limits;
        if self.spent.turns + self.reserved_turns >= l.max_turns {
            return Err(self.exhausted(Limit::MaxTurns, f64::from(l.max_turns), 1.0));
        }
        let used = self.spent.tokens_in + self.spent.tokens_out + self.reserved_tokens;
        if used + worst.tokens > l.max_tokens {
            return Err(self.exhausted(Limit::MaxTokens, l.max_tokens as f64, worst.tokens as f64));
        }
        let usd = worst.usd.unwrap_or(0.0);
        if worst.usd.is_some() && self.spent.usd + self.reserved_usd + usd > l.max_usd {
            return Err(self.exhausted(Limit::MaxUsd, l.max_usd, usd));
        }
        self.reserved_usd += usd;
        self.reserved_tokens += worst.tokens;
        self.reserved_turns += 1;
        Ok(Reservation {
            usd,
            tokens: worst.tokens,
        })
    }

    /// A call finished: drop its reservation and add what it really cost.
    pub fn settle(
        &mut self,
        r: Reservation,
        tokens_in: u64,
        tokens_out: u64,
        cached: u64,
        usd: Option<f64>,
    ) {
        self.unreserve(&r);
        self.spent.tokens_in += tokens_in;
        self.spent.tokens_out += tokens_out;
        self.spent.tokens_cached += cached;
        self.spent.turns += 1;
        match usd {
            Some(u) => self.spent.usd += u,
            None => self.spent.unpriced_calls += 1,
        }
    }

    /// A call failed: drop its reservation without counting a turn.
    pub fn release(&mut self, r: Reservation) {
        self.unreserve(&r);
    }

    fn unreserve(&mut self, r: &Reservation) {
        self.reserved_usd = (self.reserved_usd - r.usd).max(0.0);
        self.reserved_tokens = self.reserved_tokens.saturating_sub(r.tokens);
        self.reserved_turns = self.reserved_turns.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BudgetConfig {
        BudgetConfig {
            max_usd: 1.0,
            max_tokens: 10_000,
            max_turns: 3,
            max_minutes: 30,
            ..BudgetConfig::default()
        }
    }

    #[test]
    fn usd_is_checked_against_the_worst_case_before_the_call() {
        let mut b = Budget::new(&limits());
        let r = b
            .reserve(WorstCase {
                usd: Some(0.6),
                tokens: 100,
            })
            .unwrap();
        b.settle(r, 50, 50, 0, Some(0.5));
        // 0.5 spent + 0.6 worst case > 1.0: refused although the real cost might fit.
        let e = b
            .reserve(WorstCase {
                usd: Some(0.6),
                tokens: 100,
            })
            .unwrap_err();
        assert_eq!(e.limit, Limit::MaxUsd);
        assert!(e.to_string().contains("max_usd"), "{e}");
        assert_eq!(e.spent.usd, 0.5);
        // A cheaper call still fits.
        let r = b
            .reserve(WorstCase {
                usd: Some(0.4),
                tokens: 100,
            })
            .unwrap();
        b.release(r);
        assert_eq!(b.spent().turns, 1);
    }

    #[test]
    fn reservations_stop_concurrent_overspend() {
        let mut b = Budget::new(&limits());
        let _r1 = b
            .reserve(WorstCase {
                usd: Some(0.6),
                tokens: 100,
            })
            .unwrap();
        assert!(
            b.reserve(WorstCase {
                usd: Some(0.6),
                tokens: 100
            })
            .is_err()
        );
    }

    #[test]
    fn turns_and_tokens_are_hard() {
        let mut b = Budget::new(&limits());
        for _ in 0..3 {
            let r = b
                .reserve(WorstCase {
                    usd: None,
                    tokens: 10,
                })
                .unwrap();
            b.settle(r, 5, 5, 0, None);
        }
        let e = b
            .reserve(WorstCase {
                usd: None,
                tokens: 10,
            })
            .unwrap_err();
        assert_eq!(e.limit, Limit::MaxTurns);
        assert_eq!(b.spent().unpriced_calls, 3);
        let mut b = Budget::new(&limits());
        let e = b
            .reserve(WorstCase {
                usd: None,
                tokens: 10_001,
            })
            .unwrap_err();
        assert_eq!(e.limit, Limit::MaxTokens);
    }

    #[test]
    fn minutes_count_from_the_start_including_a_resumed_past() {
        let mut b = Budget::resumed(&limits(), Spend::default(), Duration::from_secs(30 * 60));
        let e = b
            .reserve(WorstCase {
                usd: None,
                tokens: 1,
            })
            .unwrap_err();
        assert_eq!(e.limit, Limit::MaxMinutes);
    }
}
