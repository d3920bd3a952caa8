//! Per-domain egress: an HTTP(S) proxy that lets only allow-listed hosts through.
//!
//! `CONNECT host:port` opens a tunnel (HTTPS and anything else over TCP); a request with an
//! absolute `http://` URI is forwarded with its request line rewritten to origin form, its
//! `Host` pinned to the URI's allowed authority and `Connection: close`: a plain-HTTP
//! connection carries that one request and its body, so neither a forged `Host` nor a second
//! request can reach another site behind the same server. Refused hosts are recorded for the
//! report.
//!
//! The sandbox gives the command no route anywhere but this proxy: in `allowlist` mode the
//! command runs in its own network namespace whose only listener is the proxy's socket.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Longest request head the proxy reads before refusing the connection.
const MAX_HEAD: usize = 32 * 1024;
/// Longest wait for an upstream connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A host the proxy refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockedHost {
    /// The host as the client named it.
    pub host: String,
    /// The port it asked for.
    pub port: u16,
    /// `CONNECT` or the HTTP method of a forwarded request.
    pub method: String,
}

/// One allow-list entry.
#[derive(Debug, Clone)]
enum Rule {
    /// Exactly this host, any port or the given one.
    Host(String, Option<u16>),
    /// Any subdomain of this suffix (`*.example.com`), any port.
    Suffix(String),
}

/// The filtering proxy: an allow-list and a record of what it refused.
#[derive(Debug, Clone)]
pub struct EgressProxy {
    rules: Arc<Vec<Rule>>,
    blocked: Arc<Mutex<Vec<BlockedHost>>>,
}

impl EgressProxy {
    /// A proxy admitting `allow` entries: `host` (any port), `host:port`, or `*.suffix`.
    /// Names compare case-insensitively; IP literals only match entries spelled the same.
    pub fn new(allow: &[String]) -> Self {
        let rules = allow
            .iter()
            .map(|a| {
                let a = a.trim().to_ascii_lowercase();
                if let Some(s) = a.strip_prefix("*.") {
                    Rule::Suffix(s.to_string())
                } else {
                    match split_host_port(&a) {
                        Some((h, p)) => Rule::Host(h, Some(p)),
                        None => Rule::Host(a.trim_matches(['[', ']']).to_string(), None),
                    }
                }
            })
            .collect();
        Self {
            rules: Arc::new(rules),
            blocked: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Whether `host:port` is on the allow-list.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        self.rules.iter().any(|r| match r {
            Rule::Host(h, p) => *h == host && p.is_none_or(|p| p == port),
            Rule::Suffix(s) => host.ends_with(&format!(".{s}")),
        })
    }

    /// Every host refused so far.
    pub fn blocked(&self) -> Vec<BlockedHost> {
        self.blocked.lock().map(|b| b.clone()).unwrap_or_default()
    }

    /// Serve connections from `listener` until the returned task is aborted.
    pub fn serve(&self, listener: TcpListener) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                let this = this.clone();
                tokio::spawn(async move {
                    if let Err(e) = this.handle(conn).await {
                        tracing::debug!(error = %e, "egress proxy connection ended");
                    }
                });
            }
        })
    }

    fn record(&self, host: &str, port: u16, method: &str) {
        tracing::info!(
            host,
            port,
            method,
            "egress refused: host not in the allowlist"
        );
        if let Ok(mut b) = self.blocked.lock() {
            b.push(BlockedHost {
                host: host.to_string(),
                port,
                method: method.to_string(),
            });
        }
    }

    async fn handle(&self, mut client: TcpStream) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(4096);
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > MAX_HEAD {
                return respond(&mut client, "431 Request Header Fields Too Large", "").await;
            }
            let mut chunk = [0u8; 4096];
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let rest = buf[head_end..].to_vec();
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split(' ');
        let (Some(method), Some(target), Some(version)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return respond(&mut client, "400 Bad Request", "malformed request line\n").await;
        };

        if method.eq_ignore_ascii_case("CONNECT") {
            let Some((host, port)) = split_host_port(target) else {
                return respond(&mut client, "400 Bad Request", "CONNECT needs host:port\n").await;
            };
            if !self.allows(&host, port) {
                self.record(&host, port, "CONNECT");
                return respond(&mut client, "403 Forbidden", &refusal(&host)).await;
            }
            let Ok(mut upstream) = connect(&host, port).await else {
                return respond(&mut client, "502 Bad Gateway", "cannot reach upstream\n").await;
            };
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await?;
            upstream.write_all(&rest).await?;
            tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            return Ok(());
        }

        let Some(after_scheme) = target.strip_prefix("http://") else {
            return respond(
                &mut client,
                "400 Bad Request",
                "only CONNECT and absolute http:// URIs are proxied\n",
            )
            .await;
        };
        let (authority, path) = match after_scheme.find('/') {
            Some(i) => (&after_scheme[..i], &after_scheme[i..]),
            None => (after_scheme, "/"),
        };
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = split_host_port(authority)
            .unwrap_or_else(|| (authority.trim_matches(['[', ']']).to_string(), 80));
        if !self.allows(&host, port) {
            self.record(&host, port, method);
            return respond(&mut client, "403 Forbidden", &refusal(&host)).await;
        }
        let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
        let Some(body_len) = body_length(&headers) else {
            return respond(
                &mut client,
                "411 Length Required",
                "only requests with no body or a Content-Length are proxied over plain HTTP\n",
            )
            .await;
        };
        let Ok(mut upstream) = connect(&host, port).await else {
            return respond(&mut client, "502 Bad Gateway", "cannot reach upstream\n").await;
        };
        upstream
            .write_all(forwarded_head(method, path, version, authority, &headers).as_bytes())
            .await?;
        // The body, and nothing after it: a second request on this connection, whatever
        // `Host` it names, never reaches the upstream.
        let first = rest.len().min(body_len);
        upstream.write_all(&rest[..first]).await?;
        let mut left = body_len - first;
        let mut chunk = [0u8; 16 * 1024];
        while left > 0 {
            let n = client.read(&mut chunk[..left.min(16 * 1024)]).await?;
            if n == 0 {
                break;
            }
            upstream.write_all(&chunk[..n]).await?;
            left -= n;
        }
        tokio::io::copy(&mut upstream, &mut client).await?;
        client.shutdown().await
    }
}

/// The head of a plain-HTTP request as it goes upstream: origin form, `Host` pinned to the
/// allowed authority (a `Host` naming another site behind the same server would reach that
/// site: domain fronting), one request per connection, and no proxy credentials.
fn forwarded_head(
    method: &str,
    path: &str,
    version: &str,
    authority: &str,
    headers: &[&str],
) -> String {
    let mut out = format!("{method} {path} {version}\r\nHost: {authority}\r\n");
    for line in headers {
        let name = line.split(':').next().unwrap_or_default().trim();
        let dropped = [
            "host",
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h));
        if !dropped {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// The request body's length from its headers: 0 without one, `None` when it cannot be
/// known from `Content-Length` alone (chunked, or conflicting lengths).
fn body_length(headers: &[&str]) -> Option<usize> {
    let mut len: Option<usize> = None;
    for line in headers {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let name = name.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        }
        if name.eq_ignore_ascii_case("content-length") {
            let v: usize = value.trim().parse().ok()?;
            if len.is_some_and(|l| l != v) {
                return None;
            }
            len = Some(v);
        }
    }
    Some(len.unwrap_or(0))
}

fn refusal(host: &str) -> String {
    format!("git-agent: egress to {host} is not in the network allowlist\n")
}

async fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "upstream connect timed out",
        )),
    }
}

async fn respond(client: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(msg.as_bytes()).await?;
    client.shutdown().await
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `host:port` or `[v6]:port` → (host, port); `None` without a valid port.
fn split_host_port(s: &str) -> Option<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:")?;
        return Some((h.to_ascii_lowercase(), p.parse().ok()?));
    }
    let (h, p) = s.rsplit_once(':')?;
    if h.contains(':') {
        return None;
    }
    Some((h.to_ascii_lowercase(), p.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_rules_match_hosts_ports_and_suffixes() {
        let p = EgressProxy::new(&[
            "index.crates.io".into(),
            "localhost:8080".into(),
            "*.Example.org".into(),
        ]);
        assert!(p.allows("index.crates.io", 443));
        assert!(p.allows("INDEX.crates.io", 80));
        assert!(p.allows("localhost", 8080));
        assert!(!p.allows("localhost", 8081));
        assert!(p.allows("a.b.example.org", 443));
        assert!(!p.allows("example.org", 443));
        assert!(!p.allows("evil-example.org", 443));
        assert!(!p.allows("crates.io", 443));
        assert!(!p.allows("127.0.0.1", 8080));
    }

    /// Issue 38 (6): on the plain-HTTP path the upstream sees the allowed authority as
    /// `Host`, whatever the client wrote, and only the first request of a connection.
    #[tokio::test]
    async fn plain_http_pins_host_and_forwards_one_request() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        let seen = tokio::spawn(async move {
            let (mut conn, _) = upstream.accept().await.unwrap();
            let mut got = Vec::new();
            let mut chunk = [0u8; 4096];
            // Everything the proxy sends until it stops (it sends no second request).
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(500), conn.read(&mut chunk)).await
            {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&chunk[..n]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        let proxy = EgressProxy::new(&[format!("127.0.0.1:{port}")]);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _serving = proxy.serve(listener);
        let mut client = TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "GET http://127.0.0.1:{port}/a HTTP/1.1\r\nHost: evil.example\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        );
        client.write_all(req.as_bytes()).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        assert!(answer.ends_with("ok"), "{answer}");
        let got = seen.await.unwrap();
        assert!(got.starts_with("GET /a HTTP/1.1\r\n"), "{got}");
        assert!(
            got.contains(&format!("Host: 127.0.0.1:{port}\r\n")),
            "{got}"
        );
        assert!(!got.contains("evil.example"), "{got}");
        assert!(!got.contains("GET /b"), "{got}");
        assert!(got.contains("Connection: close"), "{got}");
    }

    #[test]
    fn a_body_is_forwarded_only_by_its_length() {
        assert_eq!(body_length(&["Accept: x"]), Some(0));
        assert_eq!(body_length(&["Content-Length: 12"]), Some(12));
        assert_eq!(body_length(&["Transfer-Encoding: chunked"]), None);
        assert_eq!(
            body_length(&["Content-Length: 1", "content-length: 2"]),
            None
        );
    }

    #[test]
    fn host_port_parsing() {
        assert_eq!(split_host_port("a.b:443"), Some(("a.b".into(), 443)));
        assert_eq!(split_host_port("[::1]:80"), Some(("::1".into(), 80)));
        assert_eq!(split_host_port("a.b"), None);
        assert_eq!(split_host_port("::1"), None);
    }
}
