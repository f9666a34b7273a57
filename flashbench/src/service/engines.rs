//! Stand-in engines: vLLM's KV event batches (msgpack, positional) on ZeroMQ PUB sockets, as the
//! subscribers of both services expect them: frames `[topic, seq as 8 big-endian bytes, payload]`.

use rmpv::Value;

/// One engine's PUB socket.
pub struct Engine {
    socket: zmq::Socket,
    /// Where subscribers connect.
    pub endpoint: String,
    seq: u64,
}

impl Engine {
    /// A PUB socket bound on a loopback port the OS picks.
    pub fn bind(context: &zmq::Context) -> Result<Engine, String> {
        let socket = context.socket(zmq::PUB).map_err(|e| e.to_string())?;
        socket.set_linger(0).map_err(|e| e.to_string())?;
        // Nothing a run publishes may be dropped at the socket.
        socket.set_sndhwm(0).map_err(|e| e.to_string())?;
        socket
            .bind("tcp://127.0.0.1:*")
            .map_err(|e| e.to_string())?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(|e| e.to_string())?
            .map_err(|_| "the bound endpoint is not UTF-8".to_owned())?;
        Ok(Engine {
            socket,
            endpoint,
            seq: 0,
        })
    }

    /// Publishes one batch of `events` for data-parallel rank 0.
    pub fn publish(&mut self, events: Vec<Value>) -> Result<(), String> {
        let batch = Value::Array(vec![Value::F64(0.0), Value::Array(events), Value::from(0)]);
        let mut payload = Vec::new();
        rmpv::encode::write_value(&mut payload, &batch).map_err(|e| e.to_string())?;
        let frames: [&[u8]; 3] = [b"", &self.seq.to_be_bytes(), &payload];
        self.socket
            .send_multipart(frames, 0)
            .map_err(|e| e.to_string())?;
        self.seq += 1;
        Ok(())
    }
}

/// vLLM 0.33's `BlockStored` on the GPU for a chain from the start: hashes, no parent, tokens,
/// block size, no LoRA.
pub fn stored(seqs: &[u64], tokens: &[u32], block_size: usize) -> Value {
    Value::Array(vec![
        Value::from("BlockStored"),
        Value::Array(seqs.iter().map(|&s| Value::from(s)).collect()),
        Value::Nil,
        Value::Array(tokens.iter().map(|&t| Value::from(t)).collect()),
        Value::from(block_size as u64),
        Value::Nil,
        Value::from("GPU"),
    ])
}
