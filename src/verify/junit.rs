//! JUnit XML reports (Maven surefire, Gradle, pytest `--junitxml`, node `--test-reporter=junit`).
//!
//! The format is small and flat, so it is read with a tag scanner rather than an XML crate:
//! `<testcase name classname>` elements, each passing unless it holds `<failure>`, `<error>` or
//! `<skipped>`. Comments, CDATA and the five predefined and numeric entities are handled;
//! DTDs are not (reports have none).

use super::report::{Counts, Format, Names, TestReport};

/// Parses one or more JUnit XML documents into one report named `classname.name`.
pub fn parse_junit_xml<S: AsRef<str>>(documents: &[S]) -> Option<TestReport> {
    let mut report = TestReport {
        format: Format::JUnitXml,
        names: Names::Full,
        counts: Counts::default(),
        passed: Default::default(),
        failed: Default::default(),
        skipped: Default::default(),
        details: Default::default(),
    };
    let mut seen = false;
    for doc in documents {
        let doc = doc.as_ref();
        let mut pos = 0;
        while let Some(tag) = next_tag(doc, pos) {
            pos = tag.end;
            if tag.name != "testcase" || tag.closing {
                if tag.name == "testsuite" || tag.name == "testsuites" {
                    seen = true;
                }
                continue;
            }
            seen = true;
            let name = attr(tag.attrs, "name").unwrap_or_default();
            let class = attr(tag.attrs, "classname").unwrap_or_default();
            let full = if class.is_empty() {
                name
            } else {
                format!("{class}.{name}")
            };
            let mut outcome = CaseStatus::Passed;
            let mut detail = String::new();
            if !tag.self_closing {
                // Children up to </testcase>.
                let close = find_close(doc, pos, "testcase");
                let body = &doc[pos..close];
                let mut p = 0;
                while let Some(child) = next_tag(body, p) {
                    p = child.end;
                    if child.closing {
                        continue;
                    }
                    match child.name {
                        "failure" | "error" => {
                            outcome = CaseStatus::Failed;
                            if let Some(msg) = attr(child.attrs, "message") {
                                detail.push_str(&msg);
                                detail.push('\n');
                            }
                            if !child.self_closing {
                                let end = find_close(body, p, child.name);
                                detail.push_str(&text_of(&body[p..end]));
                                detail.push('\n');
                                p = end;
                            }
                        }
                        "skipped" if outcome == CaseStatus::Passed => outcome = CaseStatus::Skipped,
                        _ => {}
                    }
                }
                pos = close;
            }
            match outcome {
                CaseStatus::Passed => {
                    report.passed.insert(full);
                }
                CaseStatus::Failed => {
                    report
                        .details
                        .insert(full.clone(), detail.trim().to_owned());
                    report.failed.insert(full);
                }
                CaseStatus::Skipped => {
                    report.skipped.insert(full);
                }
            }
        }
    }
    if !seen {
        return None;
    }
    report.counts = Counts {
        passed: report.passed.len() as u64,
        failed: report.failed.len() as u64,
        skipped: report.skipped.len() as u64,
    };
    Some(report)
}

#[derive(PartialEq, Eq)]
enum CaseStatus {
    Passed,
    Failed,
    Skipped,
}

struct Tag<'a> {
    name: &'a str,
    attrs: &'a str,
    closing: bool,
    self_closing: bool,
    end: usize,
}

/// The next element tag at or after `from`, skipping comments, CDATA, declarations and
/// processing instructions.
fn next_tag(s: &str, from: usize) -> Option<Tag<'_>> {
    let mut i = from;
    loop {
        let lt = i + s.get(i..)?.find('<')?;
        let rest = &s[lt..];
        let skip_to = |end: &str| rest.find(end).map(|e| lt + e + end.len());
        if rest.starts_with("<!--") {
            i = skip_to("-->")?;
            continue;
        }
        if rest.starts_with("<![CDATA[") {
            i = skip_to("]]>")?;
            continue;
        }
        if rest.starts_with("<?") || rest.starts_with("<!") {
            i = skip_to(">")?;
            continue;
        }
        let end = tag_end(s, lt + 1)?;
        let inner = &s[lt + 1..end - 1];
        let closing = inner.starts_with('/');
        let inner = inner.trim_start_matches('/');
        let self_closing = inner.trim_end().ends_with('/');
        let inner = inner.trim_end().trim_end_matches('/');
        let name_len = inner
            .find(|c: char| c.is_whitespace())
            .unwrap_or(inner.len());
        return Some(Tag {
            name: &inner[..name_len],
            attrs: &inner[name_len..],
            closing,
            self_closing,
            end,
        });
    }
}

/// The position just past the `>` that ends a tag, honouring quoted attribute values.
fn tag_end(s: &str, from: usize) -> Option<usize> {
    let mut quote: Option<u8> = None;
    for (k, b) in s.as_bytes()[from..].iter().enumerate() {
        match (quote, *b) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(*b),
            (None, b'>') => return Some(from + k + 1),
            _ => {}
        }
    }
    None
}

/// Where `</name>` starts (the end of the text if it never closes); nested same-name
/// elements are not expected in JUnit reports.
fn find_close(s: &str, from: usize, name: &str) -> usize {
    let mut pos = from;
    while let Some(tag) = next_tag(s, pos) {
        if tag.closing && tag.name == name {
            return s[..tag.end].rfind("</").unwrap_or(tag.end);
        }
        pos = tag.end;
    }
    s.len()
}

/// The value of attribute `key`, entities decoded.
fn attr(attrs: &str, key: &str) -> Option<String> {
    let mut rest = attrs;
    loop {
        rest = rest.trim_start();
        let eq = rest.find('=')?;
        let k = rest[..eq].trim();
        let after = rest[eq + 1..].trim_start();
        let q = after.chars().next()?;
        if q != '"' && q != '\'' {
            return None;
        }
        let close = after[1..].find(q)? + 1;
        if k == key {
            return Some(decode(&after[1..close]));
        }
        rest = &after[close + 1..];
    }
}

/// Element text: CDATA kept verbatim, tags dropped, entities decoded.
fn text_of(s: &str) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if let Some(body) = rest.strip_prefix("<![CDATA[") {
            let end = body.find("]]>").unwrap_or(body.len());
            out.push_str(&body[..end]);
            i += 9 + end + 3.min(body.len() - end);
        } else if rest.starts_with('<') {
            i = tag_end(s, i + 1).unwrap_or(s.len());
        } else {
            let end = rest.find('<').unwrap_or(rest.len());
            out.push_str(&decode(&rest[..end]));
            i += end;
        }
    }
    out
}

fn decode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let tail = &rest[amp..];
        let Some(semi) = tail.find(';').filter(|p| *p <= 10) else {
            out.push('&');
            rest = &tail[1..];
            continue;
        };
        let entity = &tail[1..semi];
        let ch = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e if e.starts_with("#x") || e.starts_with("#X") => u32::from_str_radix(&e[2..], 16)
                .ok()
                .and_then(char::from_u32),
            e if e.starts_with('#') => e[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match ch {
            Some(c) => {
                out.push(c);
                rest = &tail[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_junitxml() {
        let r = parse_junit_xml(&[include_str!("testdata/pytest_junit.xml")]).unwrap();
        assert_eq!(r.failed.len(), 3);
        assert_eq!(r.passed.len(), 2);
        assert_eq!(r.skipped.len(), 1);
        assert!(r.failed.contains("tests.test_mathx.TestThing.test_method"));
        assert!(r.passed.contains("tests.test_mathx.test_parse[1-1]"));
        let d = &r.details["tests.test_mathx.test_parse[x-None]"];
        assert!(
            d.contains("> ") && d.contains("ValueError: invalid literal"),
            "{d}"
        );
        // `&#10;` in the message attribute is a newline.
        assert!(r.details["tests.test_mathx.TestThing.test_method"].contains("{'a': 2}\n"));
    }

    #[test]
    fn node_junit_reporter() {
        let r = parse_junit_xml(&[include_str!("testdata/node_junit.xml")]).unwrap();
        assert_eq!(r.failed.len(), 1);
        assert!(r.failed.contains("test.add adds two numbers"));
        assert!(r.passed.contains("test.sub subtracts two numbers"));
        assert!(r.details["test.add adds two numbers"].contains("TestContext.<anonymous>"));
    }

    #[test]
    fn surefire_reports_merge_with_cdata_errors_and_skips() {
        // The layout of surefire's TEST-*.xml (schema surefire-test-report-3.0.xsd).
        let a = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" name="com.example.CalcTest" time="0.04" tests="3" errors="1" skipped="1" failures="1">
  <properties><property name="java.version" value="17"/></properties>
  <testcase name="testAdd" classname="com.example.CalcTest" time="0.01">
    <failure message="expected: &lt;5&gt; but was: &lt;-1&gt;" type="org.opentest4j.AssertionFailedError"><![CDATA[org.opentest4j.AssertionFailedError: expected: <5> but was: <-1>
	at com.example.CalcTest.testAdd(CalcTest.java:12)
]]></failure>
  </testcase>
  <testcase name="testDiv" classname="com.example.CalcTest" time="0"><error message="/ by zero" type="java.lang.ArithmeticException">java.lang.ArithmeticException: / by zero</error><system-out><![CDATA[<testcase name="fake"/>]]></system-out></testcase>
  <testcase name="testLater" classname="com.example.CalcTest" time="0"><skipped/></testcase>
</testsuite>"#;
        let b = r#"<testsuite name="com.example.SubTest" tests="1"><testcase name="testSub" classname="com.example.SubTest" time="0.001"/></testsuite>"#;
        let r = parse_junit_xml(&[a, b]).unwrap();
        assert_eq!(
            r.failed.iter().cloned().collect::<Vec<_>>(),
            [
                "com.example.CalcTest.testAdd",
                "com.example.CalcTest.testDiv"
            ]
        );
        assert_eq!(
            r.passed.iter().cloned().collect::<Vec<_>>(),
            ["com.example.SubTest.testSub"]
        );
        assert_eq!(r.skipped.len(), 1);
        assert!(r.details["com.example.CalcTest.testAdd"].contains("expected: <5> but was: <-1>"));
        assert!(r.details["com.example.CalcTest.testAdd"].contains("CalcTest.java:12"));
        assert_eq!(
            r.counts,
            Counts {
                passed: 1,
                failed: 2,
                skipped: 1
            }
        );
    }

    #[test]
    fn real_surefire_report() {
        let r = parse_junit_xml(&[include_str!(
            "testdata/surefire_TEST-com.example.CalcTest.xml"
        )])
        .unwrap();
        assert_eq!(
            r.failed.iter().cloned().collect::<Vec<_>>(),
            ["com.example.CalcTest.testAdd"]
        );
        assert_eq!(
            r.passed.iter().cloned().collect::<Vec<_>>(),
            ["com.example.CalcTest.testSub"]
        );
        assert!(r.details["com.example.CalcTest.testAdd"].contains("CalcTest.java:7"));
    }

    #[test]
    fn not_junit_is_none() {
        assert!(parse_junit_xml(&["<html><body>hi</body></html>"]).is_none());
        assert!(parse_junit_xml::<&str>(&[]).is_none());
    }
}
