//! Tokenization shared by documents and queries: identifiers split on camelCase and
//! snake_case, lowercased, lightly stemmed, stop words dropped.

/// English and boilerplate words too common to carry meaning in a query or a file.
const STOP_WORDS: &[&str] = &[
    "a", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "com", "could", "did", "do", "does", "for", "from", "get", "github", "got", "had", "has",
    "have", "he", "her", "here", "his", "how", "http", "https", "i", "if", "in", "into", "is",
    "it", "its", "just", "like", "me", "my", "no", "not", "of", "on", "one", "or", "org", "our",
    "she", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "too", "us", "use", "used", "using", "very", "want",
    "was", "way", "we", "were", "what", "when", "where", "which", "while", "who", "why", "will",
    "with", "would", "www", "you", "your",
];

fn is_stop(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// A light suffix stemmer: enough to meet `errors`/`error`, `parsing`/`parse` half way,
/// cheap enough to run on every token of a large tree.
pub fn stem(word: &str) -> &str {
    let mut w = word;
    if w.len() > 4 && w.ends_with("ies") {
        w = &w[..w.len() - 2];
    } else if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") {
        w = &w[..w.len() - 1];
    }
    if w.len() > 5 && w.ends_with("ing") {
        w = &w[..w.len() - 3];
    } else if w.len() > 4 && w.ends_with("ed") && !w.ends_with("eed") {
        w = &w[..w.len() - 2];
    }
    if w.len() > 4 && w.ends_with('e') && !w.ends_with("ee") {
        w = &w[..w.len() - 1];
    }
    w
}

/// Split one identifier into its lowercase parts: `parseHTTPRequest_v2` gives
/// `parse`, `http`, `request`, `v2`.
pub fn split_identifier(ident: &str, mut emit: impl FnMut(&str)) {
    let bytes = ident.as_bytes();
    let mut buf = String::new();
    let mut start = 0;
    let flush = |s: &str, buf: &mut String, emit: &mut dyn FnMut(&str)| {
        if !s.is_empty() {
            buf.clear();
            buf.push_str(&s.to_ascii_lowercase());
            emit(buf);
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'_' || !c.is_ascii_alphanumeric() {
            flush(&ident[start..i], &mut buf, &mut emit);
            start = i + 1;
        } else if i > start {
            let prev = bytes[i - 1];
            let next_lower = bytes.get(i + 1).is_some_and(|b| b.is_ascii_lowercase());
            let boundary = (c.is_ascii_uppercase() && prev.is_ascii_lowercase())
                || (c.is_ascii_uppercase() && prev.is_ascii_uppercase() && next_lower)
                || (c.is_ascii_alphabetic() && prev.is_ascii_digit() && i - start > 1);
            if boundary {
                flush(&ident[start..i], &mut buf, &mut emit);
                start = i;
            }
        }
        i += 1;
    }
    flush(&ident[start..], &mut buf, &mut emit);
}

/// Call `emit` for every identifier-like word of `text` (ASCII letters, digits, `_`, not
/// starting with a digit).
pub fn identifiers(text: &str, mut emit: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            emit(&text[start..i]);
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
}

/// The index terms of `text`: every identifier split into stemmed parts, plus the whole
/// identifier (lowercased) when it has several parts, so `PairGrid` matches both `pair grid`
/// and `pairgrid`.
pub fn terms(text: &str, mut emit: impl FnMut(&str)) {
    terms_at(text, |_, t| emit(t));
}

/// [`terms`], with the byte offset in `text` of the identifier each term comes from.
pub fn terms_at(text: &str, mut emit: impl FnMut(usize, &str)) {
    let base = text.as_ptr() as usize;
    identifiers(text, |ident| {
        let at = ident.as_ptr() as usize - base;
        let mut emit = |t: &str| emit(at, t);
        if ident.len() > 64 {
            return;
        }
        let mut parts = 0;
        split_identifier(ident, |part| {
            parts += 1;
            if part.len() >= 2 && !is_stop(part) && !part.bytes().all(|b| b.is_ascii_digit()) {
                emit(stem(part));
            }
        });
        if parts > 1 {
            let whole: String = ident
                .chars()
                .filter(|c| *c != '_')
                .map(|c| c.to_ascii_lowercase())
                .collect();
            if whole.len() >= 3 {
                emit(&whole);
            }
        }
    });
}

/// Plain words, lowercased: the tokenizer of the BM25 baseline (no identifier splitting).
pub fn plain_words(text: &str, mut emit: impl FnMut(&str)) {
    identifiers(text, |w| {
        let w = w.to_ascii_lowercase();
        if w.len() >= 2 && !is_stop(&w) {
            emit(&w);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(text: &str) -> Vec<String> {
        let mut v = Vec::new();
        terms(text, |t| v.push(t.to_string()));
        v
    }

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOP_WORDS);
    }

    #[test]
    fn splits_camel_snake_and_acronyms() {
        let mut v = Vec::new();
        split_identifier("parseHTTPRequest_v2", |p| v.push(p.to_string()));
        assert_eq!(v, ["parse", "http", "request", "v2"]);
        assert_eq!(collect("PairGrid"), ["pair", "grid", "pairgrid"]);
        assert_eq!(
            collect("get_item_values"),
            ["item", "valu", "getitemvalues"]
        );
    }

    #[test]
    fn stems_plurals_and_gerunds() {
        assert_eq!(stem("errors"), "error");
        assert_eq!(stem("parsing"), "pars");
        assert_eq!(stem("parses"), stem("parse"));
        assert_eq!(stem("values"), stem("value"));
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("status"), "status");
    }
}
