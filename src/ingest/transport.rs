//! ZeroMQ sockets: the live subscription with its connection monitor, and the replay client.
//!
//! libzmq (through the `zmq` crate) rather than a pure-Rust ZMTP: it refuses a message larger
//! than `ZMQ_MAXMSGSIZE` from its frame header, before allocating, caps reconnect backoff with
//! `ZMQ_RECONNECT_IVL_MAX`, reports connections through a socket monitor, binds, and speaks
//! `ipc://`. Every wait here is sliced so that a stop request is seen within [`SLICE`].

use std::time::{Duration, Instant};

use super::endpoint::{Dial, EngineEndpoint, IngestError, SubscriberConfig};
use super::sequence::{END_OF_REPLAY, parse_seq};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The longest a socket wait lasts before the stop flag is looked at again.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// The first reconnection attempt comes this soon; later ones back off up to
/// [`SubscriberConfig::reconnect_max`].
pub(crate) const RECONNECT_FIRST: Duration = Duration::from_millis(100);

/// Names the monitor endpoints of every subscription of this process apart.
static MONITORS: AtomicU64 = AtomicU64::new(0);

fn millis(duration: Duration) -> i32 {
    duration.as_millis().clamp(1, i32::MAX as u128) as i32
}

/// Options every socket of a subscriber gets.
fn configure(socket: &zmq::Socket, config: &SubscriberConfig) -> zmq::Result<()> {
    socket.set_linger(0)?;
    socket.set_maxmsgsize(config.max_message_size.try_into().unwrap_or(i64::MAX))?;
    socket.set_reconnect_ivl(millis(RECONNECT_FIRST))?;
    socket.set_reconnect_ivl_max(millis(config.reconnect_max.max(RECONNECT_FIRST)))?;
    socket.set_rcvhwm(config.receive_queue.try_into().unwrap_or(i32::MAX))
}

/// What the connection monitor reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connection {
    /// A connection completed its handshake: a (re)connected engine.
    Up,
    /// A connection was dropped.
    Down,
}

/// The live SUB socket and the PAIR socket its monitor reports on.
pub(crate) struct Subscription {
    events: zmq::Socket,
    monitor: zmq::Socket,
    address: String,
}

impl Subscription {
    /// A SUB socket for every topic, connected to or bound at the endpoint, monitored from
    /// before its first connection so that none is missed.
    pub(crate) fn open(
        context: &zmq::Context,
        endpoint: &EngineEndpoint,
        config: &SubscriberConfig,
    ) -> Result<Subscription, IngestError> {
        let address = &endpoint.events;
        let refused = |error| IngestError::Transport {
            endpoint: address.clone(),
            error,
        };
        let events = context.socket(zmq::SUB).map_err(refused)?;
        configure(&events, config).map_err(refused)?;
        events.set_subscribe(b"").map_err(refused)?;
        let name = format!(
            "inproc://flash-ingest-monitor-{}",
            MONITORS.fetch_add(1, Ordering::Relaxed)
        );
        let watched = zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw()
            | zmq::SocketEvent::DISCONNECTED.to_raw();
        events.monitor(&name, watched.into()).map_err(refused)?;
        let monitor = context.socket(zmq::PAIR).map_err(refused)?;
        monitor.set_linger(0).map_err(refused)?;
        monitor.connect(&name).map_err(refused)?;
        match endpoint.dial {
            Dial::Connect => events.connect(address),
            Dial::Bind => events.bind(address),
        }
        .map_err(refused)?;
        Ok(Subscription {
            events,
            monitor,
            address: address.clone(),
        })
    }

    /// Dials the engine afresh. libzmq redials by itself after a connection error, but not after
    /// a protocol error such as a message over the size limit: it drops that endpoint for good.
    pub(crate) fn redial(&self) -> zmq::Result<()> {
        let _ = self.events.disconnect(&self.address);
        self.events.connect(&self.address)
    }

    /// Waits up to [`SLICE`] for a message or a connection change. `(connections ready,
    /// messages ready)`.
    pub(crate) fn wait(&self) -> zmq::Result<(bool, bool)> {
        let mut items = [
            self.monitor.as_poll_item(zmq::POLLIN),
            self.events.as_poll_item(zmq::POLLIN),
        ];
        zmq::poll(&mut items, SLICE.as_millis() as i64)?;
        Ok((items[0].is_readable(), items[1].is_readable()))
    }

    /// The next connection change, if one is queued.
    pub(crate) fn connection(&self) -> Option<Connection> {
        let frames = self.monitor.recv_multipart(zmq::DONTWAIT).ok()?;
        // Frame 0: a 16-bit event id and a 32-bit value, in native byte order; frame 1: the
        // peer's address.
        let event = u16::from_ne_bytes(frames.first()?.get(..2)?.try_into().ok()?);
        if event == zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw() {
            Some(Connection::Up)
        } else {
            Some(Connection::Down)
        }
    }

    /// The next live message, if one is queued.
    pub(crate) fn message(&self) -> Option<Vec<Vec<u8>>> {
        self.events.recv_multipart(zmq::DONTWAIT).ok()
    }
}

/// Whether an engine's replay socket answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Availability {
    /// Not seen connected since the events connection came up: the first replay waits for it.
    Unknown,
    /// Seen connected.
    Up,
    /// Did not come up, or failed a replay: not waited for until the events socket reconnects.
    Absent,
}

/// One step of a replay stream.
#[derive(Debug)]
pub(crate) enum ReplayStep {
    /// A buffered message.
    Message { seq: u64, payload: Vec<u8> },
    /// The end marker: the buffer has been sent.
    End,
    /// Not a `[b"", topic?, seq, payload]` reply; skipped.
    BadFrame,
    /// Given up (why): the socket is reset and marked absent until the next reconnection.
    Abandoned(&'static str),
}

/// The client side of vLLM's replay protocol: a DEALER sends `[b"", first_seq]`; the engine's
/// ROUTER answers every buffered batch from `first_seq` on as `[b"", topic?, seq, payload]` and
/// ends with sequence number -1.
pub(crate) struct ReplayClient {
    context: zmq::Context,
    address: String,
    config: SubscriberConfig,
    socket: zmq::Socket,
    availability: Availability,
    deadline: Instant,
}

impl ReplayClient {
    pub(crate) fn open(
        context: &zmq::Context,
        address: &str,
        config: &SubscriberConfig,
    ) -> Result<ReplayClient, IngestError> {
        let socket =
            Self::dealer(context, address, config).map_err(|error| IngestError::Transport {
                endpoint: address.to_owned(),
                error,
            })?;
        Ok(ReplayClient {
            context: context.clone(),
            address: address.to_owned(),
            config: config.clone(),
            socket,
            availability: Availability::Unknown,
            deadline: Instant::now(),
        })
    }

    fn dealer(
        context: &zmq::Context,
        address: &str,
        config: &SubscriberConfig,
    ) -> zmq::Result<zmq::Socket> {
        let socket = context.socket(zmq::DEALER)?;
        configure(&socket, config)?;
        // Requests go only to a completed connection: "writable" means "the engine is there".
        socket.set_immediate(true)?;
        socket.connect(address)?;
        Ok(socket)
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// The events socket (re)connected: the engine is there, so its replay socket is worth
    /// waiting for again, and dialled afresh rather than at the end of a backoff.
    pub(crate) fn reconnected(&mut self) {
        self.availability = Availability::Unknown;
        self.redial();
    }

    /// Asks for every buffered message from `first` on. `false` when the replay socket is not
    /// there: at once when it is known absent, after up to the replay timeout the first time.
    pub(crate) fn request(&mut self, first: u64, stop: &AtomicBool) -> bool {
        self.deadline = Instant::now() + self.config.replay_timeout;
        let writable = loop {
            if self.socket.poll(zmq::POLLOUT, 0).unwrap_or(0) > 0 {
                break true;
            }
            if self.availability == Availability::Absent
                || stop.load(Ordering::Relaxed)
                || Instant::now() >= self.deadline
            {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if !writable {
            self.availability = Availability::Absent;
            return false;
        }
        self.availability = Availability::Up;
        let request: [&[u8]; 2] = [b"", &first.to_be_bytes()];
        if self.socket.send_multipart(request, zmq::DONTWAIT).is_err() {
            self.abandon();
            return false;
        }
        true
    }

    /// The next step of the stream asked for by [`request`](Self::request).
    pub(crate) fn next(&mut self, stop: &AtomicBool) -> ReplayStep {
        loop {
            if stop.load(Ordering::Relaxed) {
                return self.abandon_with("the subscriber is shutting down");
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self.abandon_with("no end marker within the replay timeout");
            }
            let wait = left.min(SLICE).as_millis().max(1) as i64;
            match self.socket.poll(zmq::POLLIN, wait) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(_) => return self.abandon_with("the replay socket failed"),
            }
            let Ok(reply) = self.socket.recv_multipart(zmq::DONTWAIT) else {
                continue;
            };
            // [b"", topic, seq, payload] (vLLM) or [b"", seq, payload] (SGLang, older vLLM).
            let (seq, payload) = match <[Vec<u8>; 4]>::try_from(reply) {
                Ok([empty, _, seq, payload]) if empty.is_empty() => (seq, payload),
                Ok(_) => return ReplayStep::BadFrame,
                Err(reply) => match <[Vec<u8>; 3]>::try_from(reply) {
                    Ok([empty, seq, payload]) if empty.is_empty() => (seq, payload),
                    _ => return ReplayStep::BadFrame,
                },
            };
            return match parse_seq(&seq) {
                Some(END_OF_REPLAY) => ReplayStep::End,
                Some(seq) => ReplayStep::Message { seq, payload },
                None => ReplayStep::BadFrame,
            };
        }
    }

    fn abandon_with(&mut self, why: &'static str) -> ReplayStep {
        self.abandon();
        ReplayStep::Abandoned(why)
    }

    /// Replies of an abandoned stream may still come: a fresh socket never sees them.
    fn abandon(&mut self) {
        self.availability = Availability::Absent;
        self.redial();
    }

    fn redial(&mut self) {
        if let Ok(socket) = Self::dealer(&self.context, &self.address, &self.config) {
            self.socket = socket;
        }
    }
}
