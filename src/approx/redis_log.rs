//! A [`DecisionLog`] on a Redis stream (feature `redis`; Valkey speaks the same commands).

use super::log::{DecisionLog, LogError, LogPosition};
use crate::sync::{Mutex, lock};
use core::time::Duration;
use redis::{Client, Connection, RedisResult, Value};

/// The stream field that holds an encoded entry.
const FIELD: &str = "d";

/// Router replicas' decisions on one Redis stream.
///
/// Each [`append`](DecisionLog::append) is one `XADD` with a server-assigned ID, which also trims
/// entries older than the retention window (`MINID`, on the server's clock, one append behind);
/// each [`read`](DecisionLog::read) is one non-blocking `XREAD`. The decision's own time is in
/// the entry, so the append's `at` and the read's `now` are not used: the transport's delay is
/// the network's.
///
/// One connection, opened on first use, with a timeout on every command: a Redis that is down
/// or slow fails the call (counted by the replica, which keeps routing) instead of blocking it,
/// and the next call connects again. Nothing is buffered.
///
/// ```no_run
/// use core::time::Duration;
/// use flash_indexer::approx::{RedisLog, SharedApproximateIndexer};
/// use flash_indexer::{DefaultIndexer, Retention};
///
/// let log = RedisLog::open("redis://127.0.0.1:6379/", "flash:decisions:llama", Duration::from_secs(120))?;
/// let replica: SharedApproximateIndexer<DefaultIndexer, _> =
///     SharedApproximateIndexer::new(Retention::default(), log);
/// # Ok::<(), flash_indexer::approx::LogError>(())
/// ```
#[derive(Debug)]
pub struct RedisLog {
    client: Client,
    key: String,
    window: Duration,
    timeout: Duration,
    state: Mutex<Link>,
}

#[derive(Default)]
struct Link {
    connection: Option<Connection>,
    /// The server time (ms) of the last entry appended, for the next append's trim.
    last_ms: u64,
}

impl core::fmt::Debug for Link {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Link")
            .field("connected", &self.connection.is_some())
            .field("last_ms", &self.last_ms)
            .finish()
    }
}

impl RedisLog {
    /// A log on the stream `key` of the server at `url` (`redis://host:port/db`), keeping
    /// `window` of entries. Connects on first use, with a 1 s command timeout.
    ///
    /// # Errors
    ///
    /// [`LogError`] if `url` is not a Redis URL.
    pub fn open(url: &str, key: &str, window: Duration) -> Result<Self, LogError> {
        Ok(Self {
            client: Client::open(url).map_err(|e| LogError(format!("{url}: {e}")))?,
            key: key.to_owned(),
            window,
            timeout: Duration::from_secs(1),
            state: Mutex::new(Link::default()),
        })
    }

    /// The same log with another timeout for connecting and for each command.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The stream's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Runs `command` on the connection, connecting first if needed; a failure drops the
    /// connection so that the next call starts afresh.
    fn run<T>(
        &self,
        command: impl FnOnce(&mut Connection, &mut u64) -> RedisResult<T>,
    ) -> Result<T, LogError> {
        let mut link = lock(&self.state);
        let Link {
            connection,
            last_ms,
        } = &mut *link;
        if connection.is_none() {
            let fresh = self
                .client
                .get_connection_with_timeout(self.timeout)
                .and_then(|c| {
                    c.set_read_timeout(Some(self.timeout))?;
                    c.set_write_timeout(Some(self.timeout))?;
                    Ok(c)
                })
                .map_err(|e| LogError(e.to_string()))?;
            *connection = Some(fresh);
        }
        let result = command(connection.as_mut().expect("connected above"), last_ms);
        result.map_err(|e| {
            *connection = None;
            LogError(e.to_string())
        })
    }
}

impl DecisionLog for RedisLog {
    fn append(&self, _at: Duration, entry: &[u8]) -> Result<(), LogError> {
        let window_ms = u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX);
        self.run(|connection, last_ms| {
            let id: String = redis::cmd("XADD")
                .arg(&self.key)
                .arg("MINID")
                .arg(last_ms.saturating_sub(window_ms))
                .arg("*")
                .arg(FIELD)
                .arg(entry)
                .query(connection)?;
            if let Some(position) = parse_id(id.as_bytes()) {
                *last_ms = position.0;
            }
            Ok(())
        })
    }

    fn read(
        &self,
        after: Option<LogPosition>,
        _now: Duration,
        max: usize,
    ) -> Result<Vec<(LogPosition, Vec<u8>)>, LogError> {
        let LogPosition(ms, seq) = after.unwrap_or_default();
        let reply: Value = self.run(|connection, _| {
            redis::cmd("XREAD")
                .arg("COUNT")
                .arg(max.max(1))
                .arg("STREAMS")
                .arg(&self.key)
                .arg(format!("{ms}-{seq}"))
                .query(connection)
        })?;
        parse_xread(reply).ok_or_else(|| LogError("unexpected XREAD reply".into()))
    }
}

/// `ms-seq` as a position.
fn parse_id(id: &[u8]) -> Option<LogPosition> {
    let (ms, seq) = core::str::from_utf8(id).ok()?.split_once('-')?;
    Some(LogPosition(ms.parse().ok()?, seq.parse().ok()?))
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// The entries of an `XREAD` reply on one stream (nil when there are none; an array or, in
/// RESP3, a map of streams). An entry without the decision field reads as empty bytes, which
/// the replica refuses as malformed and counts.
fn parse_xread(reply: Value) -> Option<Vec<(LogPosition, Vec<u8>)>> {
    let entries = match reply {
        Value::Nil => return Some(Vec::new()),
        Value::Array(mut streams) if streams.len() == 1 => match streams.pop()? {
            Value::Array(mut pair) if pair.len() == 2 => pair.pop()?,
            _ => return None,
        },
        Value::Map(mut streams) if streams.len() == 1 => streams.pop()?.1,
        _ => return None,
    };
    let Value::Array(entries) = entries else {
        return None;
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(parts) = entry else {
                return None;
            };
            let [id, fields] = parts.as_slice() else {
                return None;
            };
            let position = parse_id(bytes(id)?)?;
            let fields: &[Value] = match fields {
                Value::Array(fields) => fields,
                _ => return None,
            };
            let data = fields
                .chunks_exact(2)
                .find(|kv| bytes(&kv[0]) == Some(FIELD.as_bytes()))
                .and_then(|kv| bytes(&kv[1]))
                .unwrap_or_default();
            Some((position, data.to_vec()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    #[test]
    fn xread_replies_parse_to_positions_and_entries() {
        assert_eq!(parse_xread(Value::Nil), Some(vec![]));
        let entry =
            |id: &[u8], fields: Vec<Value>| Value::Array(vec![bulk(id), Value::Array(fields)]);
        let stream = Value::Array(vec![
            entry(b"5-1", vec![bulk(b"d"), bulk(b"abc")]),
            entry(b"6-0", vec![bulk(b"other"), bulk(b"x")]),
        ]);
        let reply = Value::Array(vec![Value::Array(vec![bulk(b"key"), stream])]);
        assert_eq!(
            parse_xread(reply),
            Some(vec![
                (LogPosition(5, 1), b"abc".to_vec()),
                (LogPosition(6, 0), Vec::new())
            ])
        );
        assert_eq!(parse_xread(Value::Okay), None);
        assert_eq!(parse_id(b"12-x"), None);
    }
}
