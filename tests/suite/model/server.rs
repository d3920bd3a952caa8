//! A loopback HTTP/1.1 server that answers each connection with the next canned response and
//! keeps every request it received, so tests assert both what we send and how we read.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How a canned body is sent.
#[derive(Debug, Clone)]
pub enum Body {
    /// One body with `content-length`.
    Full(String),
    /// Chunked transfer, one write per piece, then the terminating chunk.
    Chunks(Vec<String>),
    /// Chunked transfer, then the connection drops without the terminating chunk.
    Cut(Vec<String>),
    /// Chunked transfer, then silence until the client gives up.
    Stall(Vec<String>),
}

/// One canned response.
#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Canned {
    pub fn json(status: u16, body: serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Body::Full(body.to_string()),
        }
    }

    pub fn sse(pieces: Vec<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Body::Chunks(pieces),
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn cut(mut self) -> Self {
        if let Body::Chunks(p) = self.body {
            self.body = Body::Cut(p);
        }
        self
    }

    pub fn stall(mut self) -> Self {
        if let Body::Chunks(p) = self.body {
            self.body = Body::Stall(p);
        }
        self
    }
}

/// `data: …` events, one per piece.
pub fn data_events(items: &[serde_json::Value]) -> Vec<String> {
    items.iter().map(|v| format!("data: {v}\n\n")).collect()
}

/// `event: type` + `data: …` events, Anthropic style (type taken from the object).
pub fn typed_events(items: &[serde_json::Value]) -> Vec<String> {
    items
        .iter()
        .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap()))
        .collect()
}

/// A request as received.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: serde_json::Value,
}

pub struct Server {
    pub addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Captured>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub async fn start(responses: Vec<Canned>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let queue = Arc::new(Mutex::new(VecDeque::from(responses)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reqs = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let queue = queue.clone();
                let reqs = reqs.clone();
                tokio::spawn(async move {
                    let Some(captured) = read_request(&mut sock).await else {
                        return;
                    };
                    reqs.lock().unwrap().push(captured);
                    let canned = queue.lock().unwrap().pop_front().unwrap_or_else(|| {
                        Canned::json(
                            500,
                            serde_json::json!({"error": {"message": "no canned response left"}}),
                        )
                    });
                    write_response(&mut sock, canned).await;
                });
            }
        });
        Self {
            addr,
            requests,
            task,
        }
    }

    /// Base URL including `/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.requests.lock().unwrap().clone()
    }
}

async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<Captured> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..]).unwrap_or(serde_json::Value::Null);
    Some(Captured {
        method,
        path,
        headers,
        body,
    })
}

async fn write_response(sock: &mut tokio::net::TcpStream, c: Canned) {
    let reason = match c.status {
        200 => "OK",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\nconnection: close\r\n", c.status);
    for (k, v) in &c.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let (pieces, end) = match c.body {
        Body::Full(b) => {
            head.push_str(&format!("content-length: {}\r\n\r\n{b}", b.len()));
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.shutdown().await;
            return;
        }
        Body::Chunks(p) => (p, "done"),
        Body::Cut(p) => (p, "cut"),
        Body::Stall(p) => (p, "stall"),
    };
    head.push_str("transfer-encoding: chunked\r\n\r\n");
    if sock.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for p in pieces {
        let chunk = format!("{:x}\r\n{p}\r\n", p.len());
        if sock.write_all(chunk.as_bytes()).await.is_err() {
            return;
        }
        let _ = sock.flush().await;
        // Separate TCP segments, so the client really sees the stream in pieces.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    match end {
        "done" => {
            let _ = sock.write_all(b"0\r\n\r\n").await;
            let _ = sock.shutdown().await;
        }
        "stall" => tokio::time::sleep(Duration::from_secs(30)).await,
        _ => {} // cut: drop the socket mid-body
    }
}
