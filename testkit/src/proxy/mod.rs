//! A TCP proxy for tests: forwards to one upstream, counts what crosses it and injects faults.
//!
//! It counts, per proxy: connections; for Postgres (detected by the startup packet), round
//! trips (a client `Sync` or simple `Query` sent while no earlier one awaits its
//! `ReadyForQuery`: statements pipelined in one flight count once) and those messages; for
//! HTTP, requests by AWS operation (`X-Amz-Target` for the JSON protocols of DynamoDB and SQS,
//! method and path shape for S3), following keep-alive, `Content-Length` and chunked bodies.
//! Counters are updated before the bytes are forwarded, so once a client has its answer,
//! everything that led to it has been counted.
//!
//! Besides faults on whole connections, a fault can single out one kind of statement or request
//! (`Fault::On`): the Postgres statements whose text contains a pattern (the Parse message of an
//! extended-protocol statement, or a simple Query), or the HTTP requests of one AWS operation,
//! and act on that direction only: hold or swallow the statement, cut the connection before or
//! after it, or delay or drop its answer. Postgres messages from the client are forwarded
//! message by message for this (a statement is forwarded whole once its Parse is complete);
//! the answer to a statement is what the server sends up to its ReadyForQuery.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use crate::pg::{Frame, PgFramer};

mod http;

use http::HttpScanner;

/// What the proxy does to traffic, switchable at any time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    #[default]
    None,
    /// New connections are closed as soon as they are accepted; open ones carry on.
    Refuse,
    /// Each connection forwards at most this many more bytes (both directions together,
    /// counted from when the fault is set or the connection opens), then both sides close.
    CutAfter(usize),
    /// Every chunk waits this long before it is forwarded.
    Delay(Duration),
    /// Connections are accepted and read, but nothing is forwarded either way.
    Blackhole,
    /// `action` on each statement or request `target` matches, on every connection; all other
    /// traffic passes.
    On(Target, Action),
}

impl Fault {
    /// The statement is held `delay`, then sent, even if its client has gone meanwhile: it
    /// reaches the server after the client gave up on it.
    pub fn hold_statement(pattern: &'static str, delay: Duration) -> Fault {
        Fault::On(Target::Statement(pattern), Action::Hold(delay))
    }

    /// The statement never reaches the server; its connection stays open, silent.
    pub fn swallow_statement(pattern: &'static str) -> Fault {
        Fault::On(Target::Statement(pattern), Action::Swallow)
    }

    /// The connection is closed instead of sending the statement.
    pub fn cut_before_statement(pattern: &'static str) -> Fault {
        Fault::On(Target::Statement(pattern), Action::CutBefore)
    }

    /// The statement is sent, and the connection closed at once: it may or may not commit.
    pub fn cut_after_statement(pattern: &'static str) -> Fault {
        Fault::On(Target::Statement(pattern), Action::CutAfter)
    }

    /// The statement is sent at once; its whole answer (so after it committed) is held `delay`.
    pub fn delay_answer_to(pattern: &'static str, delay: Duration) -> Fault {
        Fault::On(Target::Statement(pattern), Action::DelayAnswer(delay))
    }

    /// The statement is sent; once its whole answer arrived (it committed), the answer is
    /// dropped and the connection closed.
    pub fn cut_answer_to(pattern: &'static str) -> Fault {
        Fault::On(Target::Statement(pattern), Action::CutAnswer)
    }
}

/// What a `Fault::On` singles out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Postgres statements whose SQL text contains this.
    Statement(&'static str),
    /// HTTP requests of this operation, as `Counts::http` names them (`S3.PutObject`).
    Request(&'static str),
}

/// What a `Fault::On` does to the statement or request it singles out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// It (and whatever follows it on its connection) waits this long, then is sent even if
    /// the client has gone.
    Hold(Duration),
    /// It is never sent; the connection stays open and forwards nothing more to the server.
    Swallow,
    /// Both sides are closed instead of sending it.
    CutBefore,
    /// It is sent whole, then both sides are closed before any answer.
    CutAfter,
    /// It is sent at once; its answer is held this long.
    DelayAnswer(Duration),
    /// It is sent; its answer, once whole, is dropped and both sides are closed.
    CutAnswer,
}

/// What crossed the proxy since it started or was last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub connections: u64,
    pub pg_round_trips: u64,
    /// `Sync` and `Query` messages: statements, however pipelined.
    pub pg_syncs: u64,
    /// The SQL text of each statement sent (its Parse, or simple Query), in order.
    pub pg_statements: Vec<String>,
    /// HTTP requests by operation, e.g. `DynamoDB.UpdateItem`, `SQS.SendMessageBatch`,
    /// `S3.PutObject`.
    pub http: BTreeMap<String, u64>,
    /// Connections the proxy could not follow (TLS requested, an HTTP head over 64 KiB): their
    /// traffic is forwarded but not counted, so a budget check should see none.
    pub unparsed_connections: u64,
    /// Statements and requests a `Fault::On` acted on.
    pub faults_applied: u64,
    /// Of those, the ones still being held (`Action::Hold` until the server answered the held
    /// statement, or its request was sent; `Action::DelayAnswer` until the answer is sent on).
    pub faults_holding: u64,
}

impl Counts {
    pub fn http_requests(&self) -> u64 {
        self.http.values().sum()
    }

    pub fn op(&self, name: &str) -> u64 {
        self.http.get(name).copied().unwrap_or_default()
    }
}

pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: AbortHandle,
}

struct Shared {
    upstream: SocketAddr,
    counts: Mutex<Counts>,
    /// The fault and a generation number that changes with every `set_fault`.
    fault: Mutex<(u64, Fault)>,
    connections: Mutex<Vec<AbortHandle>>,
}

impl Proxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            counts: Mutex::default(),
            fault: Mutex::default(),
            connections: Mutex::default(),
        });
        let accepting = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepting.counts.lock().unwrap().connections += 1;
                let task = tokio::spawn(serve(accepting.clone(), client));
                let mut open = accepting.connections.lock().unwrap();
                open.retain(|task| !task.is_finished());
                open.push(task.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            addr,
            shared,
            accept,
        }
    }

    /// A proxy to the local PostgreSQL server (`DATABASE_URL`, TCP).
    pub async fn to_local_postgres() -> Proxy {
        let (host, port) = crate::stack::server_host_port();
        Proxy::start(resolve(&format!("{host}:{port}")).await).await
    }

    /// A proxy to the AWS stand-in (`AWS_ENDPOINT_URL`).
    pub async fn to_aws_stand_in() -> Proxy {
        let endpoint = crate::stack::aws_endpoint();
        let authority = endpoint
            .split("://")
            .last()
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        Proxy::start(resolve(authority).await).await
    }

    /// `url`, a database URL of the proxied server (`postgres://user[:password]@host[:port]/…`),
    /// through this proxy.
    pub fn database_url(&self, url: &str) -> String {
        let (user, rest) = url.split_once('@').unwrap();
        let path = &rest[rest.find('/').unwrap()..];
        format!("{user}@{}{path}", self.addr)
    }

    /// `http://` and this proxy's address: an endpoint URL through it.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn counts(&self) -> Counts {
        self.shared.counts.lock().unwrap().clone()
    }

    /// Starts counting afresh.
    pub fn reset(&self) {
        *self.shared.counts.lock().unwrap() = Counts::default();
    }

    pub fn set_fault(&self, fault: Fault) {
        let mut current = self.shared.fault.lock().unwrap();
        *current = (current.0 + 1, fault);
    }

    /// Closes every open connection now (both sides).
    pub fn cut_connections(&self) {
        for task in self.shared.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

async fn resolve(authority: &str) -> SocketAddr {
    tokio::net::lookup_host(authority)
        .await
        .unwrap()
        .next()
        .unwrap_or_else(|| panic!("{authority} does not resolve"))
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_connections();
    }
}

impl Shared {
    fn fault(&self) -> (u64, Fault) {
        *self.fault.lock().unwrap()
    }
}

/// One connection's state, shared by its two directions.
#[derive(Default)]
struct Conn {
    postgres: bool,
    /// Postgres `Sync`/`Query` messages sent and not yet answered by `ReadyForQuery`.
    awaiting_ready: u64,
    /// Postgres: `Sync`/`Query` messages forwarded to the server, and the `ReadyForQuery`
    /// answers to them forwarded back (the startup's own is not one).
    syncs_forwarded: u64,
    readies: u64,
    /// `CutAfter`: the fault generation the budget belongs to, and the bytes left.
    budget: Option<(u64, usize)>,
    /// A targeted fault on an answer: for Postgres the answer to the n-th `Sync`, for HTTP the
    /// next response.
    answer_fault: Option<(u64, Action)>,
    /// HTTP `CutAfter`: cut once this many requests were forwarded whole.
    cut_after_request: Option<u64>,
    /// A held statement or request counts as holding until its answer comes: for Postgres the
    /// answer to this `Sync`, for HTTP (0) the next response bytes; or until the connection ends.
    watching: Option<u64>,
}

impl Conn {
    /// How many of `n` bytes may pass under `CutAfter(limit)` of generation `generation`.
    fn spend(&mut self, generation: u64, limit: usize, n: usize) -> usize {
        let left = match self.budget {
            Some((g, left)) if g == generation => left,
            _ => limit,
        };
        let allowed = n.min(left);
        self.budget = Some((generation, left - allowed));
        allowed
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

/// The connection was cut by a fault: drop both sides.
struct Cut;

async fn serve(shared: Arc<Shared>, mut client: TcpStream) {
    match shared.fault().1 {
        Fault::Refuse => return,
        Fault::Blackhole => {
            let mut sink = [0; 4096];
            while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
            return;
        }
        _ => {}
    }
    let Ok(upstream) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let conn = Mutex::new(Conn::default());
    let _ = tokio::try_join!(
        pump(
            &shared,
            &conn,
            client_read,
            upstream_write,
            Direction::ToServer
        ),
        pump(
            &shared,
            &conn,
            upstream_read,
            client_write,
            Direction::ToClient
        ),
    );
    if conn.lock().unwrap().watching.take().is_some() {
        shared.counts.lock().unwrap().faults_holding -= 1;
    }
}

/// One direction's forwarding: counts, applies the byte budget, writes.
struct Forward<'a> {
    shared: &'a Shared,
    conn: &'a Mutex<Conn>,
    to: OwnedWriteHalf,
    scanner: Option<Scanner>,
    direction: Direction,
}

/// What became of bytes handed to `Forward::send`.
enum Sent {
    All,
    /// The peer is gone: stop reading.
    PeerGone,
}

impl Forward<'_> {
    /// Forwards `bytes` (all of them, or up to a `CutAfter` budget and then cut).
    async fn send(&mut self, bytes: &[u8]) -> Result<Sent, Cut> {
        if bytes.is_empty() {
            return Ok(Sent::All);
        }
        let (generation, fault) = self.shared.fault();
        let pass = match fault {
            Fault::CutAfter(limit) => {
                self.conn
                    .lock()
                    .unwrap()
                    .spend(generation, limit, bytes.len())
            }
            _ => bytes.len(),
        };
        let chunk = &bytes[..pass];
        let (direction, conn) = (self.direction, self.conn);
        let scanner = self
            .scanner
            .get_or_insert_with(|| Scanner::new(direction, chunk, conn));
        observe(self.shared, self.conn, scanner, chunk);
        if self.to.write_all(chunk).await.is_err() {
            return Ok(Sent::PeerGone);
        }
        if pass < bytes.len() {
            return Err(Cut);
        }
        Ok(Sent::All)
    }

    fn note_applied(&self) {
        self.shared.counts.lock().unwrap().faults_applied += 1;
    }

    /// Sleeps `delay`, counted as a fault holding meanwhile.
    async fn hold(&self, delay: Duration) {
        self.shared.counts.lock().unwrap().faults_holding += 1;
        tokio::time::sleep(delay).await;
        self.shared.counts.lock().unwrap().faults_holding -= 1;
    }
}

/// Forwards one direction until EOF, observing and applying the fault to each chunk.
async fn pump(
    shared: &Shared,
    conn: &Mutex<Conn>,
    mut from: OwnedReadHalf,
    to: OwnedWriteHalf,
    direction: Direction,
) -> Result<(), Cut> {
    let mut buf = vec![0; 16 * 1024];
    let mut forward = Forward {
        shared,
        conn,
        to,
        scanner: None,
        direction,
    };
    // The client's Postgres messages, split for statement faults; `None` until the first bytes
    // tell the protocol, and for anything but a Postgres client.
    let mut frames: Option<Option<Statements>> = None;
    let mut swallowing = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let (_, fault) = shared.fault();
        match fault {
            Fault::Blackhole => continue,
            Fault::Delay(delay) => tokio::time::sleep(delay).await,
            _ => {}
        }
        if swallowing {
            continue;
        }
        let frames = frames.get_or_insert_with(|| {
            (direction == Direction::ToServer && chunk.first() == Some(&0))
                .then(Statements::default)
        });
        let sent = match (direction, frames) {
            (Direction::ToServer, Some(framer)) => {
                let target = match fault {
                    Fault::On(Target::Statement(pattern), action) => Some((pattern, action)),
                    _ => None,
                };
                to_postgres(&mut forward, framer, chunk, target, &mut swallowing).await?
            }
            (Direction::ToServer, None) => {
                let target = match fault {
                    Fault::On(Target::Request(op), action) => Some((op, action)),
                    _ => None,
                };
                to_http_server(&mut forward, chunk, target, &mut swallowing).await?
            }
            (Direction::ToClient, _) => to_client(&mut forward, chunk).await?,
        };
        if matches!(sent, Sent::PeerGone) {
            break;
        }
    }
    let _ = forward.to.shutdown().await;
    Ok(())
}

/// A Postgres client's messages as the statement faults see them.
struct Statements {
    framer: PgFramer,
    /// `Sync`s and `Query`s framed so far, this one included once `end_statement` ran.
    syncs: u64,
    /// The action waiting for the current statement's end.
    pending: Option<Action>,
}

impl Default for Statements {
    fn default() -> Self {
        Self {
            framer: PgFramer::frontend().collecting_statements(),
            syncs: 0,
            pending: None,
        }
    }
}

/// What a statement fault must know of a client chunk's frames, owned (the framer lends them
/// only while it runs, and acting on them waits).
enum Piece {
    Bytes(Vec<u8>),
    /// A Parse or Query message; `ends` for a Query, which is answered on its own.
    Statement {
        bytes: Vec<u8>,
        text: String,
        ends: bool,
    },
    Sync,
}

/// A client's chunk of Postgres messages, with the statement fault (pattern, action) if any.
async fn to_postgres(
    forward: &mut Forward<'_>,
    statements: &mut Statements,
    chunk: &[u8],
    target: Option<(&str, Action)>,
    swallowing: &mut bool,
) -> Result<Sent, Cut> {
    let mut pieces = Vec::new();
    statements.framer.push(chunk, |frame| match frame {
        Frame::Bytes(bytes) => match pieces.last_mut() {
            Some(Piece::Bytes(last)) => last.extend_from_slice(bytes),
            _ => pieces.push(Piece::Bytes(bytes.to_vec())),
        },
        Frame::Statement { kind, bytes, text } => pieces.push(Piece::Statement {
            bytes: bytes.to_vec(),
            text,
            ends: kind == b'Q',
        }),
        Frame::Ends(b'S') => pieces.push(Piece::Sync),
        Frame::Begins(_) | Frame::Ends(_) => {}
    });
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Bytes(bytes) => out.extend_from_slice(&bytes),
            Piece::Statement { bytes, text, ends } => {
                forward
                    .shared
                    .counts
                    .lock()
                    .unwrap()
                    .pg_statements
                    .push(text.clone());
                let hit = target.filter(|(pattern, _)| text.contains(pattern));
                if let Some((_, action)) = hit {
                    forward.note_applied();
                    match action {
                        Action::Hold(delay) => {
                            if let Sent::PeerGone = forward.send(&out).await? {
                                return Ok(Sent::PeerGone);
                            }
                            out.clear();
                            // Holding until the server has answered it (end_statement).
                            forward.shared.counts.lock().unwrap().faults_holding += 1;
                            tokio::time::sleep(delay).await;
                            statements.pending = Some(action);
                        }
                        Action::Swallow => {
                            forward.send(&out).await?;
                            *swallowing = true;
                            return Ok(Sent::All);
                        }
                        Action::CutBefore => {
                            forward.send(&out).await?;
                            return Err(Cut);
                        }
                        Action::CutAfter | Action::DelayAnswer(_) | Action::CutAnswer => {
                            statements.pending = Some(action);
                        }
                    }
                }
                out.extend_from_slice(&bytes);
                if ends {
                    end_statement(forward, statements, &out).await?;
                }
            }
            Piece::Sync => end_statement(forward, statements, &out).await?,
        }
    }
    forward.send(&out).await
}

/// A `Sync` (or a simple `Query`) ended a statement: apply what waited for its end.
async fn end_statement(
    forward: &mut Forward<'_>,
    statements: &mut Statements,
    out: &[u8],
) -> Result<(), Cut> {
    statements.syncs += 1;
    match statements.pending.take() {
        Some(Action::CutAfter) => {
            forward.send(out).await?;
            Err(Cut)
        }
        Some(Action::Hold(_)) => {
            forward.conn.lock().unwrap().watching = Some(statements.syncs);
            Ok(())
        }
        Some(action) => {
            forward.conn.lock().unwrap().answer_fault = Some((statements.syncs, action));
            Ok(())
        }
        None => Ok(()),
    }
}

/// A client's chunk of HTTP, with the request fault (operation, action) if any. A request is
/// recognised once its head is complete; the fault acts on the chunk that completes it.
async fn to_http_server(
    forward: &mut Forward<'_>,
    chunk: &[u8],
    target: Option<(&str, Action)>,
    swallowing: &mut bool,
) -> Result<Sent, Cut> {
    if let Some((op, action)) = target {
        let mut hit = None;
        if let Some(Scanner::Http(http)) = &forward.scanner {
            let mut peek = http.clone();
            let before = peek.heads;
            let mut index = 0;
            peek.feed(chunk, |name| {
                index += 1;
                if name == op && hit.is_none() {
                    hit = Some(before + index);
                }
            });
        } else if forward.scanner.is_none() {
            let mut peek = HttpScanner::default();
            let mut index = 0;
            peek.feed(chunk, |name| {
                index += 1;
                if name == op && hit.is_none() {
                    hit = Some(index);
                }
            });
        }
        if let Some(request) = hit {
            forward.note_applied();
            match action {
                Action::Hold(delay) => {
                    // Holding until its answer comes (to_client) or the connection ends.
                    forward.shared.counts.lock().unwrap().faults_holding += 1;
                    tokio::time::sleep(delay).await;
                    forward.conn.lock().unwrap().watching = Some(0);
                }
                Action::Swallow => {
                    *swallowing = true;
                    return Ok(Sent::All);
                }
                Action::CutBefore => return Err(Cut),
                Action::CutAfter => forward.conn.lock().unwrap().cut_after_request = Some(request),
                Action::DelayAnswer(_) | Action::CutAnswer => {
                    forward.conn.lock().unwrap().answer_fault = Some((0, action));
                }
            }
        }
    }
    let sent = forward.send(chunk).await?;
    let done = match &forward.scanner {
        Some(Scanner::Http(http)) => http.done,
        _ => 0,
    };
    let mut conn = forward.conn.lock().unwrap();
    if conn.cut_after_request.is_some_and(|n| done >= n) {
        conn.cut_after_request = None;
        return Err(Cut);
    }
    Ok(sent)
}

/// A server's chunk, with a pending fault on the answer it belongs to applied.
async fn to_client(forward: &mut Forward<'_>, chunk: &[u8]) -> Result<Sent, Cut> {
    let released = {
        let mut conn = forward.conn.lock().unwrap();
        !conn.postgres && conn.watching.take().is_some()
    };
    if released {
        forward.shared.counts.lock().unwrap().faults_holding -= 1;
    }
    let pending = forward.conn.lock().unwrap().answer_fault;
    if let Some((sync, action)) = pending {
        // Postgres: the answer is whole once its ReadyForQuery is in; HTTP: the next bytes.
        let ours = match &forward.scanner {
            Some(Scanner::Postgres(pg, _)) => {
                let mut peek = pg.clone();
                let mut readies = 0;
                peek.message_types(chunk, |kind| readies += u64::from(kind == b'Z'));
                forward.conn.lock().unwrap().readies + readies >= sync
            }
            _ => sync == 0,
        };
        if ours {
            forward.conn.lock().unwrap().answer_fault = None;
            match action {
                Action::DelayAnswer(delay) => forward.hold(delay).await,
                _ => return Err(Cut),
            }
        }
    }
    forward.send(chunk).await
}

#[derive(Clone, Copy)]
enum Side {
    Frontend,
    Backend,
}

/// What a direction's bytes are parsed as. Both protocols speak first from the client, so the
/// client's first bytes decide for the connection.
enum Scanner {
    /// With the side: the client's (frontend) or the server's.
    Postgres(PgFramer, Side),
    Http(HttpScanner),
    Ignored,
}

impl Scanner {
    fn new(direction: Direction, first: &[u8], conn: &Mutex<Conn>) -> Scanner {
        let mut conn = conn.lock().unwrap();
        match direction {
            // A startup packet begins with its length, whose high byte is 0; HTTP with a method.
            Direction::ToServer if first.first() == Some(&0) => {
                conn.postgres = true;
                Scanner::Postgres(PgFramer::frontend(), Side::Frontend)
            }
            Direction::ToServer => Scanner::Http(HttpScanner::default()),
            Direction::ToClient if conn.postgres => {
                Scanner::Postgres(PgFramer::backend(), Side::Backend)
            }
            Direction::ToClient => Scanner::Ignored,
        }
    }
}

fn observe(shared: &Shared, conn: &Mutex<Conn>, scanner: &mut Scanner, chunk: &[u8]) {
    let mut counts = shared.counts.lock().unwrap();
    let was_opaque = scanner.opaque();
    match scanner {
        Scanner::Postgres(pg, side) => {
            let mut conn = conn.lock().unwrap();
            let side = *side;
            pg.message_types(chunk, |message| match (side, message) {
                (Side::Frontend, b'S' | b'Q') => {
                    counts.pg_syncs += 1;
                    if conn.awaiting_ready == 0 {
                        counts.pg_round_trips += 1;
                    }
                    conn.awaiting_ready += 1;
                    conn.syncs_forwarded += 1;
                }
                (Side::Backend, b'Z') => {
                    conn.awaiting_ready = conn.awaiting_ready.saturating_sub(1);
                    if conn.readies < conn.syncs_forwarded {
                        conn.readies += 1;
                    }
                    if conn.watching == Some(conn.readies) {
                        conn.watching = None;
                        counts.faults_holding -= 1;
                    }
                }
                _ => {}
            });
        }
        Scanner::Http(http) => http.feed(chunk, |op| *counts.http.entry(op).or_default() += 1),
        Scanner::Ignored => {}
    }
    if scanner.opaque() && !was_opaque {
        counts.unparsed_connections += 1;
    }
}

impl Scanner {
    fn opaque(&self) -> bool {
        match self {
            Scanner::Postgres(pg, _) => pg.opaque(),
            Scanner::Http(http) => http.opaque,
            Scanner::Ignored => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that echoes what it reads.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    /// Writes `message` and reads until `expect` bytes came back, EOF, or 300 ms of silence.
    async fn exchange(socket: &mut TcpStream, message: &[u8], expect: usize) -> Vec<u8> {
        let _ = socket.write_all(message).await;
        let mut got = Vec::new();
        let mut buf = [0; 1024];
        while got.len() < expect {
            match tokio::time::timeout(Duration::from_millis(300), socket.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        got
    }

    #[tokio::test]
    async fn forwards_and_applies_each_fault() {
        let proxy = Proxy::start(echo_server().await).await;
        let connect = || TcpStream::connect(proxy.addr);

        let mut open = connect().await.unwrap();
        assert_eq!(exchange(&mut open, b"hello", 5).await, b"hello");

        proxy.set_fault(Fault::Refuse);
        let mut refused = connect().await.unwrap();
        assert_eq!(exchange(&mut refused, b"x", 1).await, b"", "closed at once");
        assert_eq!(exchange(&mut open, b"still", 5).await, b"still");

        proxy.set_fault(Fault::Delay(Duration::from_millis(50)));
        let start = std::time::Instant::now();
        assert_eq!(exchange(&mut open, b"slow", 4).await, b"slow");
        assert!(
            start.elapsed() >= Duration::from_millis(100),
            "delayed each way"
        );

        // 6 bytes go up and come back: 12 of the budget; the next 3 bytes pass up, and the
        // connection is cut before they can come back.
        proxy.set_fault(Fault::CutAfter(15));
        assert_eq!(exchange(&mut open, b"abcdef", 6).await, b"abcdef");
        assert_eq!(exchange(&mut open, b"ghijkl", 6).await, b"");

        proxy.set_fault(Fault::Blackhole);
        let mut silent = connect().await.unwrap();
        assert_eq!(exchange(&mut silent, b"anyone?", 7).await, b"");

        proxy.set_fault(Fault::None);
        let mut fresh = connect().await.unwrap();
        assert_eq!(exchange(&mut fresh, b"back", 4).await, b"back");
        proxy.cut_connections();
        assert_eq!(exchange(&mut fresh, b"gone", 4).await, b"");
        assert_eq!(proxy.counts().connections, 4);
        assert_eq!(proxy.counts().http_requests(), 0, "not HTTP");
    }

    /// A client of the real Postgres through `proxy`.
    async fn pg_client(proxy: &Proxy) -> tokio_postgres::Client {
        let server: tokio_postgres::Config = crate::stack::server_url().parse().unwrap();
        let mut via = tokio_postgres::Config::new();
        via.host("127.0.0.1")
            .port(proxy.addr.port())
            .user(server.get_user().unwrap_or("postgres"))
            .dbname(server.get_dbname().unwrap_or("postgres"));
        let (client, connection) = via.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    #[tokio::test]
    async fn statement_faults_act_on_the_matching_statement_only() {
        let proxy = Proxy::to_local_postgres().await;
        let client = pg_client(&proxy).await;
        let slow = Duration::from_millis(300);
        let timed = |sql: &'static str| {
            let client = &client;
            async move {
                let started = std::time::Instant::now();
                let result =
                    tokio::time::timeout(Duration::from_secs(2), client.query_typed(sql, &[]))
                        .await;
                (result.map(|r| r.is_ok()), started.elapsed())
            }
        };

        proxy.set_fault(Fault::delay_answer_to("'target'", slow));
        let (ok, took) = timed("SELECT 'other'").await;
        assert!(ok == Ok(true) && took < slow, "others pass at once");
        let (ok, took) = timed("SELECT 'target'").await;
        assert!(ok == Ok(true) && took >= slow, "its answer waits");
        proxy.set_fault(Fault::hold_statement("'target'", slow));
        let (ok, took) = timed("SELECT 'target'").await;
        assert!(ok == Ok(true) && took >= slow, "it waits before it is sent");
        assert_eq!(proxy.counts().faults_applied, 2);
        assert_eq!(
            proxy.counts().faults_holding,
            0,
            "the held one was answered"
        );

        for fault in [
            Fault::swallow_statement("'target'"),
            Fault::cut_before_statement("'target'"),
            Fault::cut_after_statement("'target'"),
            Fault::cut_answer_to("'target'"),
        ] {
            proxy.set_fault(fault);
            let client = pg_client(&proxy).await;
            assert!(client.query_typed("SELECT 'other'", &[]).await.is_ok());
            let result =
                tokio::time::timeout(slow, client.query_typed("SELECT 'target'", &[])).await;
            match fault {
                Fault::On(_, Action::Swallow) => assert!(result.is_err(), "never answered"),
                _ => assert!(matches!(result, Ok(Err(_))), "{fault:?}: connection closed"),
            }
        }
        assert_eq!(proxy.counts().faults_applied, 6);
    }

    #[tokio::test]
    async fn counts_postgres_round_trips_against_a_real_server() {
        let proxy = Proxy::to_local_postgres().await;
        let client = pg_client(&proxy).await;
        assert_eq!(
            proxy.counts().pg_round_trips,
            0,
            "the startup is not counted"
        );

        client.query_typed("SELECT 1", &[]).await.unwrap();
        // Two statements sent before either answer: one flight.
        let (a, b) = tokio::join!(
            client.query_typed("SELECT 2", &[]),
            client.query_typed("SELECT 3", &[]),
        );
        a.unwrap();
        b.unwrap();
        client.batch_execute("SELECT 4").await.unwrap();
        let counts = proxy.counts();
        assert_eq!((counts.pg_syncs, counts.pg_round_trips), (4, 3));
        assert_eq!(counts.unparsed_connections, 0);
    }
}
