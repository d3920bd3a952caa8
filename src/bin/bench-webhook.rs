//! bench-webhook: signed deliveries per second and acknowledgement latency of the webhook
//! receiver with its durable enqueue, against a peer receiver in the same run.
//!
//! usage: bench-webhook [--secs N] [--conc 1,16,64,256] [--rate 500] [--rate-secs N] [--rounds N]
//!        [--peer-dir DIR] [--only ours|peer]   (--rate 0: no open loop)
//!        bench-webhook load --url URL --payload FILE --sig SIG --prefix ID
//!        (--conc C | --rate R) --secs N [--warmup N]
//!
//! Ours: the real `git agent serve` HTTP stack (`server::serve`: its accept loop and axum
//! router, size cap, signature check, the one `serde_json` parse of the delivery into
//! `trigger::Event`, whose stored form is what the job keeps, the job's lane and label, then
//! `Store::enqueue` of the job in one durable transaction before the 2xx) on a
//! SQLite store in a temp dir on disk (WAL, `synchronous=FULL`, as `serve` opens it), served
//! in this process on loopback with `serve`'s defaults (a multi-threaded runtime, a `warn` log
//! filter). No workers run: the figure is the acknowledgement path alone.
//!
//! The peer: `@octokit/webhooks`' node middleware (`createNodeMiddleware`, what Probot is
//! built on) from npm, in `benches/webhook-peer/` (installed with `npm ci` when missing). It
//! verifies the same signature over the same raw body, parses it, dispatches it to a handler
//! and answers 200; it stores nothing.
//!
//! The load runs in a second process (this binary's `load` mode) on loopback — a minimal
//! keep-alive HTTP/1.1 client on one thread, one `write` a request, so the load takes as little
//! CPU as it can from the two receivers (the way `wrk` would) — with a fixed
//! body — a real `issues.labeled` payload, GitHub's own example from
//! `@octokit/webhooks-examples` — signed once, and a fresh `X-GitHub-Delivery` per request, so
//! every delivery to ours is a new job. The ids increase, as GitHub's time-based (version 1)
//! UUIDs do; random ids would cost ours more (each dirties a page of the delivery-id index:
//! ~18% fewer deliveries a second, measured once at 64 and 256 connections). Closed loop: C connections each sending the next
//! request when the last is answered, for a few C. Open loop: a fixed schedule of R requests
//! a second, each request's latency measured from its intended send time (so a stalled server
//! is not hidden by a stalled sender). Every measurement of ours is followed by the peer's
//! at the same setting (and the order flips each round) so machine noise hits both alike.
//! After the run, ours must have stored exactly one delivery per 2xx it answered, and the
//! peer's handler must have seen one event per 2xx.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods)]

use std::io::{BufRead as _, BufReader, Write as _};

/// The allocator `git-agent` runs with, so the receiver measured here is the one `serve` runs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use git_agent::server::{self, AppState, signature};
use git_agent::store;
use secrecy::SecretString;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn num<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T> {
    match flag(args, name) {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{name} takes a number, not {v:?}")),
        None => Ok(default),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("load") {
        return load_main(&args[1..]);
    }
    bench_main(&args)
}

// ---------------------------------------------------------------------------------------------
// The load generator (a separate process).

/// What one load run measured; printed by `load` as one JSON line.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Measured {
    /// Requests answered 2xx inside the measurement window.
    ok: u64,
    /// Requests answered otherwise (or failed) inside the window.
    errors: u64,
    /// Every 2xx answered, warm-up included (for the stored-count check).
    ok_total: u64,
    /// Window length, seconds.
    secs: f64,
    /// 2xx per second in the window.
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// The first non-2xx answer seen, if any.
    first_error: Option<String>,
    /// The receiver's CPU time per 2xx answer (warm-up included), microseconds: measured by
    /// the bench around the load process, not by it.
    #[serde(default, skip_serializing)]
    cpu_us: f64,
}

struct Sample {
    /// When the request should have gone (open loop) or went (closed loop).
    start: Instant,
    done: Instant,
    ok: bool,
}

fn load_main(args: &[String]) -> Result<()> {
    let url = flag(args, "--url").context("--url")?.to_string();
    let payload_path = flag(args, "--payload").context("--payload")?;
    let sig = flag(args, "--sig").context("--sig")?.to_string();
    let prefix = flag(args, "--prefix").context("--prefix")?.to_string();
    let secs: f64 = num(args, "--secs", 5.0)?;
    let warmup: f64 = num(args, "--warmup", 1.0)?;
    let conc: Option<usize> = flag(args, "--conc").map(str::parse).transpose()?;
    let rate: Option<f64> = flag(args, "--rate").map(str::parse).transpose()?;
    let body: &'static [u8] = Box::leak(
        std::fs::read(payload_path)
            .with_context(|| format!("read {payload_path}"))?
            .into_boxed_slice(),
    );
    // One thread, as each of `wrk`'s: no work stealing or cross-thread wake-ups between the
    // connections' tasks. It needs ~25 us of CPU a request, so one core drives either receiver;
    // two worker threads cost ~10% more CPU a request, taken from the cores the receivers share.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let out = rt.block_on(async move {
        let target = Endpoint::parse(&url)?;
        let load = Load {
            target: Arc::new(target),
            sig,
            prefix,
            body,
            next: Arc::new(AtomicU64::new(0)),
            idle: Arc::new(std::sync::Mutex::new(Vec::new())),
            first_error: Arc::new(std::sync::Mutex::new(None)),
        };
        let t0 = Instant::now();
        let from = t0 + Duration::from_secs_f64(warmup);
        let until = from + Duration::from_secs_f64(secs);
        let samples = match (conc, rate) {
            (Some(c), None) => closed_loop(&load, c, until).await,
            (None, Some(r)) => open_loop(&load, r, t0, until).await,
            _ => bail!("give one of --conc and --rate"),
        };
        let first_error = load.first_error.lock().ok().and_then(|e| e.clone());
        Ok(summarize(&samples, from, until, first_error))
    })?;
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}

/// Where the load goes: `http://HOST:PORT/PATH` (plain HTTP on loopback only).
struct Endpoint {
    addr: SocketAddr,
    host: String,
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint> {
        let rest = url
            .strip_prefix("http://")
            .with_context(|| format!("{url}: the load speaks plain http only"))?;
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr: SocketAddr = host
            .parse()
            .with_context(|| format!("{url}: give an IP:PORT address"))?;
        Ok(Endpoint {
            addr,
            host: host.to_string(),
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        })
    }
}

/// The load's HTTP/1.1 client: one keep-alive connection, the request written with one
/// `write` (head and body in one buffer), the response read just far enough to know its status
/// and where it ends (`Content-Length` or chunked). Far lighter than a general client, so the
/// load process takes as little as it can of the cores the receivers run on (what `wrk` does).
struct Conn {
    stream: tokio::net::TcpStream,
    out: Vec<u8>,
    inbuf: Vec<u8>,
}

impl Conn {
    async fn open(target: &Endpoint) -> std::io::Result<Conn> {
        let stream = tokio::net::TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            out: Vec::with_capacity(16 * 1024),
            inbuf: Vec::with_capacity(4096),
        })
    }

    /// Send `head` + `body`; the response's status, and whether the connection stays open.
    async fn round_trip(&mut self, head: &[u8], body: &[u8]) -> std::io::Result<(u16, bool)> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        self.out.clear();
        self.out.extend_from_slice(head);
        self.out.extend_from_slice(body);
        self.stream.write_all(&self.out).await?;
        self.inbuf.clear();
        loop {
            if let Some(done) = parse_response(&self.inbuf)? {
                return Ok(done);
            }
            if self.inbuf.capacity() - self.inbuf.len() < 1024 {
                self.inbuf.reserve(4096);
            }
            if self.stream.read_buf(&mut self.inbuf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

/// A whole response in `buf`: `Some((status, keep_alive))`; `None` while more is needed.
fn parse_response(buf: &[u8]) -> std::io::Result<Option<(u16, bool)>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| bad("response head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let (mut length, mut chunked, mut keep) = (None, false, true);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| bad("bad content-length"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            keep = !value.eq_ignore_ascii_case("close");
        }
    }
    let body = &buf[end + 4..];
    if chunked {
        let mut at = 0;
        loop {
            let Some(eol) = body[at..].windows(2).position(|w| w == b"\r\n") else {
                return Ok(None);
            };
            let line = std::str::from_utf8(&body[at..at + eol]).map_err(|_| bad("chunk size"))?;
            let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad("chunk size"))?;
            let next = at + eol + 2 + size + 2;
            if body.len() < next {
                return Ok(None);
            }
            if size == 0 {
                return Ok(Some((status, keep)));
            }
            at = next;
        }
    }
    match length {
        Some(n) if body.len() < n => Ok(None),
        Some(_) => Ok(Some((status, keep))),
        None => Err(bad("response with neither content-length nor chunked")),
    }
}

#[derive(Clone)]
struct Load {
    target: Arc<Endpoint>,
    sig: String,
    prefix: String,
    body: &'static [u8],
    next: Arc<AtomicU64>,
    /// Open connections not in use (the open loop's pool).
    idle: Arc<std::sync::Mutex<Vec<Conn>>>,
    first_error: Arc<std::sync::Mutex<Option<String>>>,
}

impl Load {
    /// Send one delivery with a fresh id over `conn` (opened when `None`, dropped on an error
    /// or `Connection: close`); true on a 2xx.
    async fn send(&self, conn: &mut Option<Conn>) -> bool {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             User-Agent: GitHub-Hookshot/bench\r\nX-GitHub-Event: issues\r\n\
             X-GitHub-Delivery: {prefix}-{n:010}\r\nX-GitHub-Hook-ID: 1\r\n\
             X-Hub-Signature-256: {sig}\r\nContent-Length: {len}\r\n\r\n",
            path = self.target.path,
            host = self.target.host,
            prefix = self.prefix,
            sig = self.sig,
            len = self.body.len(),
        );
        let why = match self.exchange(conn, head.as_bytes()).await {
            Ok(status) if (200..300).contains(&status) => return true,
            Ok(status) => format!("status {status}"),
            Err(e) => format!("request: {e}"),
        };
        if let Ok(mut first) = self.first_error.lock()
            && first.is_none()
        {
            *first = Some(why);
        }
        false
    }

    async fn exchange(&self, conn: &mut Option<Conn>, head: &[u8]) -> std::io::Result<u16> {
        let c = match conn {
            Some(c) => c,
            None => conn.insert(Conn::open(&self.target).await?),
        };
        match c.round_trip(head, self.body).await {
            Ok((status, keep)) => {
                if !keep {
                    *conn = None;
                }
                Ok(status)
            }
            Err(e) => {
                *conn = None;
                Err(e)
            }
        }
    }
}

async fn closed_loop(load: &Load, conc: usize, until: Instant) -> Vec<Sample> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..conc {
        let load = load.clone();
        tasks.spawn(async move {
            let mut out = Vec::new();
            let mut conn = None;
            while Instant::now() < until {
                let start = Instant::now();
                let ok = load.send(&mut conn).await;
                out.push(Sample {
                    start,
                    done: Instant::now(),
                    ok,
                });
            }
            out
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(v) = r {
            all.extend(v);
        }
    }
    all
}

async fn open_loop(load: &Load, rate: f64, t0: Instant, until: Instant) -> Vec<Sample> {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut tasks = tokio::task::JoinSet::new();
    let mut i: u32 = 0;
    loop {
        let intended = t0 + period * i;
        if intended >= until {
            break;
        }
        tokio::time::sleep_until(intended.into()).await;
        let load = load.clone();
        tasks.spawn(async move {
            let mut conn = load.idle.lock().ok().and_then(|mut idle| idle.pop());
            let ok = load.send(&mut conn).await;
            if let (Some(c), Ok(mut idle)) = (conn, load.idle.lock()) {
                idle.push(c);
            }
            Sample {
                start: intended,
                done: Instant::now(),
                ok,
            }
        });
        i += 1;
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(s) = r {
            all.push(s);
        }
    }
    all
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Closed loop: what completed inside `[from, until)`. Open loop: what was scheduled inside it.
fn summarize(
    samples: &[Sample],
    from: Instant,
    until: Instant,
    first_error: Option<String>,
) -> Measured {
    let ok_total = samples.iter().filter(|s| s.ok).count() as u64;
    let in_window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.start >= from && s.start < until)
        .collect();
    let mut lat: Vec<f64> = in_window
        .iter()
        .filter(|s| s.ok)
        .map(|s| (s.done - s.start).as_secs_f64() * 1e3)
        .collect();
    lat.sort_by(f64::total_cmp);
    let ok = lat.len() as u64;
    let errors = in_window.len() as u64 - ok;
    let secs = (until - from).as_secs_f64();
    Measured {
        ok,
        errors,
        ok_total,
        secs,
        rps: ok as f64 / secs,
        p50_ms: percentile(&lat, 0.50),
        p99_ms: percentile(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(f64::NAN),
        first_error,
        cpu_us: 0.0,
    }
}

// ---------------------------------------------------------------------------------------------
// The bench: both receivers, the load runs, the table.

struct Target {
    name: &'static str,
    url: String,
    /// The receiver's process (this one for ours), whose CPU time is read around each load.
    pid: u32,
}

/// The CPU time (user and system, all threads) process `pid` has used so far, from
/// `/proc/<pid>/stat`, in seconds.
#[allow(unsafe_code)]
fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces), from the third on.
    let rest = stat.rsplit_once(')').context("a /proc stat line")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        Ok(fields
            .get(i)
            .context("a short /proc stat line")?
            .parse::<f64>()?)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are the stat line's 14th and 15th fields.
    Ok((ticks(11)? + ticks(12)?) / hz)
}

struct Peer {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Closing stdin ends the peer; kill it if it lingers.
        drop(self.child.stdin.take());
        std::thread::sleep(Duration::from_millis(100));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `npm ci` in the peer's directory unless its packages are there.
fn install_peer(dir: &Path) -> Result<()> {
    if !dir.join("node_modules/@octokit/webhooks-examples").is_dir() {
        eprintln!("installing the peer in {} (npm ci)", dir.display());
        let st = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(dir)
            .status()
            .context("run npm ci for the peer")?;
        if !st.success() {
            bail!("npm ci failed in {}", dir.display());
        }
    }
    Ok(())
}

fn start_peer(dir: &Path, secret: &str) -> Result<Peer> {
    install_peer(dir)?;
    let mut child = Command::new("node")
        .arg("server.js")
        .current_dir(dir)
        .env("WEBHOOK_SECRET", secret)
        .env("PORT", "0")
        .env("NODE_ENV", "production")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // It logs the refused check delivery at length.
        .stderr(Stdio::null())
        .spawn()
        .context("start node (is Node.js installed?)")?;
    let stdout = child.stdout.take().context("peer stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let port: u16 = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("the peer did not start: {line:?}"))?;
    Ok(Peer {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    })
}

/// GitHub's own `issues.labeled` example payload, as sent (compact JSON).
fn labeled_payload(peer_dir: &Path) -> Result<Vec<u8>> {
    let path = peer_dir.join("node_modules/@octokit/webhooks-examples/api.github.com/index.json");
    let all: Value = serde_json::from_slice(
        &std::fs::read(&path).with_context(|| format!("read {}", path.display()))?,
    )?;
    let example = all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == "issues")
        .flat_map(|e| e["examples"].as_array().into_iter().flatten())
        .find(|p| p["action"] == "labeled")
        .context("no issues.labeled example in @octokit/webhooks-examples")?;
    Ok(serde_json::to_vec(example)?)
}

struct Run<'a> {
    exe: PathBuf,
    payload: &'a Path,
    sig: &'a str,
    seq: u32,
}

impl Run<'_> {
    fn load(&mut self, target: &Target, mode: &[String], secs: f64) -> Result<Measured> {
        self.seq += 1;
        let prefix = format!("{}-{}-{}", target.name, std::process::id(), self.seq);
        let cpu_before = cpu_secs(target.pid)?;
        let out = Command::new(&self.exe)
            .arg("load")
            .args(["--url", &target.url])
            .arg("--payload")
            .arg(self.payload)
            .args(["--sig", self.sig, "--prefix", &prefix])
            .args(["--secs", &secs.to_string()])
            .args(mode)
            .stderr(Stdio::inherit())
            .output()
            .context("run the load process")?;
        if !out.status.success() {
            bail!("the load process failed for {}", target.name);
        }
        let cpu = cpu_secs(target.pid)? - cpu_before;
        let mut m: Measured = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("load output: {}", String::from_utf8_lossy(&out.stdout)))?;
        m.cpu_us = 1e6 * cpu / m.ok_total.max(1) as f64;
        if let Some(e) = &m.first_error {
            eprintln!("  {}: {} errors; first: {e}", target.name, m.errors);
        }
        Ok(m)
    }
}

/// One signed request through reqwest (the sanity checks before measuring).
async fn post(url: &str, body: &[u8], sig: &str, delivery: &str) -> Result<u16> {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", "issues")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", sig)
        .body(body.to_vec())
        .send()
        .await?;
    Ok(r.status().as_u16())
}

/// The median (the mean of the middle two of an even count: with 2 rounds, their mean, not
/// the better one).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 0 => f64::midpoint(v[n / 2 - 1], v[n / 2]),
        n => v[n / 2],
    }
}

fn bench_main(args: &[String]) -> Result<()> {
    let secs: f64 = num(args, "--secs", 5.0)?;
    let rate: f64 = num(args, "--rate", 500.0)?;
    let rate_secs: f64 = num(args, "--rate-secs", 10.0)?;
    let rounds: u32 = num(args, "--rounds", 1)?;
    if !(rate >= 0.0 && rate.is_finite()) {
        bail!("--rate takes a rate in deliveries a second (0 skips the open loop), not {rate}");
    }
    let concs: Vec<usize> = flag(args, "--conc")
        .unwrap_or("1,16,64,256")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("--conc takes numbers separated by commas")?;
    let peer_dir = flag(args, "--peer-dir").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/webhook-peer"),
        PathBuf::from,
    );
    let only = flag(args, "--only");

    let _ = rustls::crypto::ring::default_provider().install_default();
    // A temp dir on disk (not tmpfs: fsync must cost what it costs).
    let tmp = tempfile::Builder::new()
        .prefix("bench-webhook")
        .tempdir_in(std::env::temp_dir())?;
    install_peer(&peer_dir)?;
    let body = labeled_payload(&peer_dir)?;
    let payload = tmp.path().join("payload.json");
    std::fs::write(&payload, &body)?;
    let secret = format!("bench-{:016x}", fastrand::u64(..));
    let sig = signature::sign(&SecretString::from(secret.clone()), &body);

    // Ours, as `serve` runs it: warn-level logs (to a file here, stderr there).
    let log = std::fs::File::create(tmp.path().join("serve.log"))?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::sync::Mutex::new(log))
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let db = tmp.path().join("serve.db");
    let (store, ours_addr, shutdown) = rt.block_on(async {
        let store = store::open(&format!("sqlite://{}", db.display())).await?;
        let app = AppState::new(store.clone(), SecretString::from(secret.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = server::serve(listener, app, stop).await {
                eprintln!("our server stopped: {e}");
            }
        });
        anyhow::Ok((store, addr, shutdown))
    })?;
    let peer = start_peer(&peer_dir, &secret)?;
    let mut targets = vec![
        Target {
            name: "ours",
            url: format!("http://{ours_addr}/webhook"),
            pid: std::process::id(),
        },
        Target {
            name: "peer",
            url: format!("http://{}/webhook", peer.addr),
            pid: peer.child.id(),
        },
    ];
    if let Some(only) = only {
        targets.retain(|t| t.name == only);
    }

    // Both verify: a signed delivery is taken, a tampered signature refused.
    let mut bad_sig = sig.clone();
    bad_sig.replace_range(sig.len() - 4.., "0000");
    for t in &targets {
        let good = rt.block_on(post(&t.url, &body, &sig, &format!("{}-check-ok", t.name)))?;
        let bad = rt.block_on(post(
            &t.url,
            &body,
            &bad_sig,
            &format!("{}-check-bad", t.name),
        ))?;
        // Ours answers 401; @octokit/webhooks answers 400 ("signature does not match").
        let refused = if t.name == "ours" {
            bad == 401
        } else {
            (400..500).contains(&bad)
        };
        if !(200..300).contains(&good) || !refused {
            bail!(
                "{}: a signed delivery got {good}, a bad signature {bad} (want 2xx, a refusal)",
                t.name
            );
        }
    }
    let mut answered = [1u64, 1u64];

    println!(
        "bench-webhook: {} B issues.labeled payload; ours = axum + SQLite (WAL, synchronous=FULL) \
         in {}; peer = @octokit/webhooks {} createNodeMiddleware on node {}",
        body.len(),
        tmp.path().display(),
        peer_version(&peer_dir),
        node_version(),
    );
    let mut run = Run {
        exe: std::env::current_exe()?,
        payload: &payload,
        sig: &sig,
        seq: 0,
    };
    // closed[conc][target] = rps per round; open[target] = (p50, p99, rps) per round.
    let mut closed: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); targets.len()]; concs.len()];
    let mut open: Vec<Vec<Measured>> = vec![Vec::new(); targets.len()];
    // cpu[conc][target] = the receiver's CPU microseconds per delivery, per round.
    let mut cpu = closed.clone();
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..targets.len()).collect()
        } else {
            (0..targets.len()).rev().collect()
        };
        for (ci, &c) in concs.iter().enumerate() {
            for &ti in &order {
                let m = run.load(&targets[ti], &["--conc".into(), c.to_string()], secs)?;
                eprintln!(
                    "round {round} closed c={c:<4} {:<5} {:>8.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  cpu {:>5.0} us  errors {}",
                    targets[ti].name, m.rps, m.p50_ms, m.p99_ms, m.cpu_us, m.errors
                );
                answered[ti] += m.ok_total;
                closed[ci][ti].push(m.rps);
                cpu[ci][ti].push(m.cpu_us);
            }
        }
        for &ti in order.iter().filter(|_| rate > 0.0) {
            let m = run.load(
                &targets[ti],
                &["--rate".into(), rate.to_string()],
                rate_secs,
            )?;
            eprintln!(
                "round {round} open {rate}/s   {:<5} {:>8.0}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  errors {}",
                targets[ti].name, m.rps, m.p50_ms, m.p99_ms, m.max_ms, m.errors
            );
            answered[ti] += m.ok_total;
            open[ti].push(m);
        }
    }

    // Every 2xx of ours is a stored delivery and job; every 2xx of the peer reached its handler.
    let stored = rt.block_on(store.delivery_count())?;
    let jobs = rt.block_on(store.counts())?;
    let peer_seen: u64 = rt
        .block_on(async {
            reqwest::get(format!("http://{}/count", peer.addr))
                .await?
                .text()
                .await
        })?
        .trim()
        .parse()?;
    for (ti, t) in targets.iter().enumerate() {
        let (seen, what) = if t.name == "ours" {
            (stored, "deliveries stored")
        } else {
            (peer_seen, "events handled")
        };
        println!("{}: {} answered 2xx, {seen} {what}", t.name, answered[ti]);
        if seen != answered[ti] {
            bail!("{}: {} 2xx answers but {seen} {what}", t.name, answered[ti]);
        }
    }
    let job_total: u64 = jobs.iter().map(|(_, n)| n).sum();
    println!("ours: {job_total} jobs, by state {jobs:?}");
    if job_total != stored {
        bail!("ours: {stored} deliveries stored but {job_total} jobs");
    }

    if targets.len() == 2 {
        println!();
        println!(
            "| closed loop (median of {rounds}) | ours deliveries/s | peer deliveries/s | ours / peer \
             | ours CPU us/delivery | peer CPU us/delivery |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        for (ci, c) in concs.iter().enumerate() {
            let o = median(&mut closed[ci][0]);
            let p = median(&mut closed[ci][1]);
            let (oc, pc) = (median(&mut cpu[ci][0]), median(&mut cpu[ci][1]));
            println!(
                "| {c} connections | {o:.0} | {p:.0} | {:.2}x | {oc:.0} | {pc:.0} |",
                o / p
            );
        }
    }
    if targets.len() == 2 && rate > 0.0 {
        println!();
        println!("| open loop {rate}/s, {rate_secs} s (median of {rounds}) | ours | peer |");
        println!("|---|---:|---:|");
        let med = |ti: usize, f: fn(&Measured) -> f64| {
            let mut v: Vec<f64> = open[ti].iter().map(f).collect();
            median(&mut v)
        };
        println!(
            "| p50 ack latency, ms | {:.2} | {:.2} |",
            med(0, |m| m.p50_ms),
            med(1, |m| m.p50_ms)
        );
        println!(
            "| p99 ack latency, ms | {:.2} | {:.2} |",
            med(0, |m| m.p99_ms),
            med(1, |m| m.p99_ms)
        );
        println!(
            "| max, ms | {:.2} | {:.2} |",
            med(0, |m| m.max_ms),
            med(1, |m| m.max_ms)
        );
        println!(
            "| answered/s | {:.0} | {:.0} |",
            med(0, |m| m.rps),
            med(1, |m| m.rps)
        );
    }
    if targets.len() == 2 {
        let best = |ti: usize| {
            concs
                .iter()
                .enumerate()
                .map(|(ci, _)| median(&mut closed[ci][ti].clone()))
                .fold(0.0, f64::max)
        };
        let ratio = best(0) / best(1);
        println!();
        println!(
            "peak throughput ours / peer: {ratio:.2}x, every 2xx durable (target >= 2x: {})",
            if ratio >= 2.0 { "met" } else { "MISSED" },
        );
        if rate > 0.0 {
            let mut p99: Vec<f64> = open[0].iter().map(|m| m.p99_ms).collect();
            let p99 = median(&mut p99);
            println!(
                "ours p99 at {rate}/s: {p99:.2} ms (target < 50 ms: {})",
                if p99 < 50.0 { "met" } else { "MISSED" },
            );
        }
    }
    shutdown.cancel();
    drop(peer);
    std::io::stdout().flush()?;
    Ok(())
}

fn peer_version(dir: &Path) -> String {
    std::fs::read(dir.join("node_modules/@octokit/webhooks/package.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["version"].as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn node_version() -> String {
    Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}
