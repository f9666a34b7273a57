//! Decoding and mapping engine events (feature `vllm`): real vLLM events from
//! `../shared/testdata/vllm/`, both encodings, every hash representation, and bad input.

use flash_indexer::ingest::{
    BlockStored, DecodeError, DpRank, Engine, EngineEvent, EventMapper, KvEventBatch, MapConfig,
    MapError, decode_batch,
};
use flash_indexer::testing::{self, CountingAlloc};
use flash_indexer::{EventKind, KvIndex, NaiveIndexer, SeqHash, Worker, hash};
use rmpv::Value;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// One real `BlockStored` event captured from vLLM.
struct RealEvent {
    block_hashes: Vec<u64>,
    token_ids: Vec<u32>,
    block_size: u32,
    lora_name: Option<String>,
}

fn real_event(file: &str) -> RealEvent {
    let path = format!(
        "{}/../shared/testdata/vllm/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["event_type"], "BlockStored");
    assert_eq!(json["medium"], "GPU");
    assert!(json["parent_block_hash"].is_null());
    RealEvent {
        block_hashes: json["block_hashes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_u64().unwrap())
            .collect(),
        token_ids: json["token_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect(),
        block_size: json["block_size"].as_u64().unwrap() as u32,
        lora_name: json["lora_name"].as_str().map(str::to_owned),
    }
}

/// How the test encodes a struct: vLLM's positional arrays or its tagged maps.
#[derive(Clone, Copy, Debug)]
enum Encoding {
    Array,
    Map,
}

/// A struct in either encoding: `fields` in declaration order, `tag` first when it has one.
fn encode_struct(encoding: Encoding, tag: Option<&str>, fields: Vec<(&str, Value)>) -> Value {
    match encoding {
        Encoding::Array => Value::Array(
            tag.map(Value::from)
                .into_iter()
                .chain(fields.into_iter().map(|(_, v)| v))
                .collect(),
        ),
        Encoding::Map => Value::Map(
            tag.map(|t| (Value::from("type"), Value::from(t)))
                .into_iter()
                .chain(fields.into_iter().map(|(k, v)| (Value::from(k), v)))
                .collect(),
        ),
    }
}

fn batch_bytes(encoding: Encoding, events: Vec<Value>, dp_rank: Option<u32>) -> Vec<u8> {
    let mut fields = vec![("ts", Value::from(1.5)), ("events", Value::Array(events))];
    if let Some(rank) = dp_rank {
        fields.push(("data_parallel_rank", Value::from(rank)));
    }
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &encode_struct(encoding, None, fields)).unwrap();
    bytes
}

/// The real event as vLLM's `BlockStored`, with each hash written by `hash_value`.
fn stored_value(event: &RealEvent, encoding: Encoding, hash_value: impl Fn(u64) -> Value) -> Value {
    let fields = vec![
        (
            "block_hashes",
            Value::Array(event.block_hashes.iter().map(|&h| hash_value(h)).collect()),
        ),
        ("parent_block_hash", Value::Nil),
        (
            "token_ids",
            Value::Array(event.token_ids.iter().map(|&t| Value::from(t)).collect()),
        ),
        ("block_size", Value::from(event.block_size)),
        (
            "lora_id",
            event
                .lora_name
                .as_ref()
                .map_or(Value::Nil, |_| Value::from(1)),
        ),
        ("medium", Value::from("GPU")),
        (
            "lora_name",
            event.lora_name.as_deref().map_or(Value::Nil, Value::from),
        ),
    ];
    encode_struct(encoding, Some("BlockStored"), fields)
}

/// Every way an engine may send the 64-bit hash `h`, with the engine that reads it back as `h`.
/// Writes a 64-bit hash as a msgpack value.
type HashWriter = fn(u64) -> Value;

fn hash_representations() -> Vec<(&'static str, Engine, HashWriter)> {
    vec![
        ("unsigned int", Engine::Vllm, |h| Value::from(h)),
        ("signed int", Engine::Vllm, |h| Value::from(h as i64)),
        ("vLLM digest bytes", Engine::Vllm, |h| {
            // A 32-byte digest whose low 64 bits, big-endian, are `h`.
            let mut digest = vec![0xA5; 24];
            digest.extend_from_slice(&h.to_be_bytes());
            Value::Binary(digest)
        }),
        ("SGLang digest bytes", Engine::Sglang, |h| {
            // SGLang publishes the first 8 bytes of its SHA-256, big-endian, as signed.
            let mut digest = h.to_be_bytes().to_vec();
            digest.extend_from_slice(&[0x5A; 24]);
            Value::Binary(digest)
        }),
    ]
}

fn indexes() -> Vec<(&'static str, Box<dyn KvIndex>)> {
    let mut all: Vec<(&'static str, Box<dyn KvIndex>)> =
        vec![("naive", Box::new(NaiveIndexer::default()))];
    all.extend(
        testing::enabled_layouts()
            .into_iter()
            .map(|f| (f.name, (f.make)())),
    );
    all
}

#[test]
fn real_vllm_events_carry_engine_hashes_and_score_every_block() {
    for (file, lora) in [
        ("kv_event_base.json", None),
        ("kv_event_lora.json", Some("Alice")),
    ] {
        let event = real_event(file);
        assert_eq!(event.lora_name.as_deref(), lora, "{file}");
        assert_eq!(event.block_hashes.len(), 25, "{file}");
        let query = match lora {
            Some(name) => hash::local_hashes_lora(&event.token_ids, 16, name),
            None => hash::local_hashes(&event.token_ids, 16),
        };
        for encoding in [Encoding::Array, Encoding::Map] {
            for (how, engine, hash_value) in hash_representations() {
                let what = format!("{file}, {encoding:?}, hashes as {how}");
                let bytes = batch_bytes(
                    encoding,
                    vec![stored_value(&event, encoding, hash_value)],
                    Some(3),
                );
                let batch = decode_batch(&bytes, engine).unwrap_or_else(|e| panic!("{what}: {e}"));
                let mapped = EventMapper::new(42, MapConfig::default()).map(&batch, 0);
                assert_eq!(mapped.events.len(), 1, "{what}");
                assert!(mapped.rejected.is_empty() && mapped.filtered == 0, "{what}");
                let worker = Worker::new(42, 3);

                for (name, index) in indexes() {
                    index.apply(&mapped.events[0]).unwrap();
                    let scores = index.find_matches(&query);
                    assert_eq!(scores.get(worker), Some(25), "{what}, {name}");
                    assert_eq!(index.block_count(worker), 25, "{what}, {name}");
                    // The engine's hashes are the index's seqs: the dump names each of them,
                    // and removing them by those hashes empties the worker.
                    let mut seqs: Vec<u64> = index
                        .dump()
                        .iter()
                        .flat_map(|e| match &e.kind {
                            EventKind::Stored { blocks, .. } => {
                                blocks.iter().map(|b| b.seq.0).collect()
                            }
                            _ => Vec::new(),
                        })
                        .collect();
                    seqs.sort_unstable();
                    let mut expected = event.block_hashes.clone();
                    expected.sort_unstable();
                    assert_eq!(seqs, expected, "{what}, {name}");
                    if lora.is_some() {
                        let plain = hash::local_hashes(&event.token_ids, 16);
                        assert_eq!(
                            index.find_matches(&plain).get(worker),
                            None,
                            "{what}, {name}"
                        );
                    }
                    let removed = flash_indexer::Event {
                        worker,
                        event_id: 1,
                        kind: EventKind::Removed {
                            blocks: event.block_hashes.iter().map(|&h| SeqHash(h)).collect(),
                        },
                    };
                    index.apply(&removed).unwrap();
                    assert_eq!(index.block_count(worker), 0, "{what}, {name}");
                }
            }
        }
    }
}

#[test]
fn positional_and_map_encodings_decode_alike() {
    let event = real_event("kv_event_base.json");
    let removed = |encoding| {
        encode_struct(
            encoding,
            Some("BlockRemoved"),
            vec![
                (
                    "block_hashes",
                    Value::Array(vec![Value::from(event.block_hashes[24])]),
                ),
                ("medium", Value::from("GPU")),
            ],
        )
    };
    let cleared = |encoding| encode_struct(encoding, Some("AllBlocksCleared"), vec![]);
    let decoded: Vec<KvEventBatch> = [Encoding::Array, Encoding::Map]
        .map(|encoding| {
            let events = vec![
                stored_value(&event, encoding, Value::from),
                removed(encoding),
                cleared(encoding),
            ];
            decode_batch(&batch_bytes(encoding, events, Some(1)), Engine::Vllm).unwrap()
        })
        .into();
    assert_eq!(decoded[0], decoded[1]);
    let batch = &decoded[0];
    assert_eq!(batch.data_parallel_rank, Some(1));
    assert_eq!(batch.ts, 1.5);
    assert!(
        matches!(&batch.events[0], EngineEvent::BlockStored(s) if s.block_hashes.len() == 25 && s.medium.as_deref() == Some("GPU"))
    );
    assert!(
        matches!(&batch.events[1], EngineEvent::BlockRemoved(r) if r.block_hashes == vec![SeqHash(event.block_hashes[24])])
    );
    assert_eq!(batch.events[2], EngineEvent::AllBlocksCleared);
}

#[test]
fn newer_fields_are_ignored_and_older_events_lack_some() {
    let tokens: Vec<Value> = (0..16).map(Value::from).collect();
    // vLLM's newest positional layout: ..., lora_name, extra_keys, group_idx, spec kind, window,
    // and a field nobody has invented yet.
    let newest = Value::Array(vec![
        "BlockStored".into(),
        Value::Array(vec![7.into()]),
        Value::Nil,
        Value::Array(tokens.clone()),
        16.into(),
        Value::Nil,
        "GPU".into(),
        Value::Nil,
        // One block, keyed by one multimodal item starting 3 tokens in (vLLM 0.33's shape).
        Value::Array(vec![Value::Array(vec![Value::Array(vec![
            "image-id".into(),
            3.into(),
        ])])]),
        2.into(),
        "full_attention".into(),
        Value::Nil,
        Value::Map(vec![("future".into(), true.into())]),
    ]);
    // An engine from before `medium` and `lora_name`: six fields.
    let oldest = Value::Array(vec![
        "BlockStored".into(),
        Value::Array(vec![8.into()]),
        Value::Nil,
        Value::Array(tokens),
        16.into(),
        Value::Nil,
    ]);
    let removed_old = Value::Array(vec!["BlockRemoved".into(), Value::Array(vec![8.into()])]);
    let unknown_array = Value::Array(vec!["BlockMoved".into(), 1.into()]);
    let unknown_map = Value::Map(vec![("type".into(), "Checkpoint".into())]);
    let mut bytes = Vec::new();
    let batch = Value::Array(vec![
        0.25.into(),
        Value::Array(vec![
            newest,
            oldest,
            removed_old,
            unknown_array,
            unknown_map,
        ]),
        Value::Nil,
        "a field from the future".into(),
    ]);
    rmpv::encode::write_value(&mut bytes, &batch).unwrap();
    let batch = decode_batch(&bytes, Engine::Vllm).unwrap();
    assert_eq!(batch.unknown_events, 2);
    assert_eq!(batch.events.len(), 3);
    let EngineEvent::BlockStored(newest) = &batch.events[0] else {
        panic!()
    };
    assert_eq!(newest.group_idx, Some(2));
    let EngineEvent::BlockStored(oldest) = &batch.events[1] else {
        panic!()
    };
    assert_eq!(
        (oldest.medium.as_deref(), oldest.lora_name.as_deref()),
        (None, None)
    );
    let mapped = EventMapper::new(1, MapConfig::default()).map(&batch, 0);
    assert_eq!(mapped.events.len(), 3, "no medium means GPU");
}

fn decode_value(value: Value) -> Result<KvEventBatch, DecodeError> {
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &value).unwrap();
    decode_batch(&bytes, Engine::Vllm)
}

#[test]
fn missing_or_mistyped_fields_are_clear_errors() {
    // A valid first event, so that each case is about the second one.
    let cleared = || Value::Array(vec!["AllBlocksCleared".into()]);
    let batch = |event: Value| Value::Array(vec![0.into(), Value::Array(vec![cleared(), event])]);
    let cases = [
        (
            Value::Array(vec![0.into()]),
            "batch: required field `events` is missing",
        ),
        (
            Value::from("hello"),
            "batch: expected an array or a map, found the string \"hello\"",
        ),
        (
            Value::Map(vec![("events".into(), Value::Array(vec![]))]),
            "batch: required field `ts` is missing",
        ),
        (
            batch(Value::Array(vec![
                "BlockStored".into(),
                Value::Array(vec![]),
            ])),
            "events[1]: required field `parent_block_hash` is missing",
        ),
        (
            batch(Value::Map(vec![(
                "block_hashes".into(),
                Value::Array(vec![]),
            )])),
            "events[1]: required field `type` is missing",
        ),
        (
            batch(Value::Array(vec![
                "BlockRemoved".into(),
                Value::Array(vec![1.into(), Value::Binary(vec![1, 2, 3])]),
            ])),
            "events[1].block_hashes[1]: expected a block hash digest of at least 8 bytes, found 3 bytes",
        ),
        (
            batch(Value::Array(vec![
                "BlockStored".into(),
                Value::Array(vec![]),
                Value::Nil,
                Value::Array(vec![Value::from(-1)]),
                16.into(),
            ])),
            "events[1].token_ids[0]: expected a token id in 0..2^32, found the integer -1",
        ),
        (
            batch(Value::Array(vec![
                "BlockStored".into(),
                Value::Array(vec![]),
                Value::Nil,
                Value::Array(vec![]),
                0.into(),
            ])),
            "events[1].block_size: expected a block size in 1..2^32, found the integer 0",
        ),
        (
            Value::Array(vec![
                0.into(),
                Value::Array(vec![cleared()]),
                Value::from(-2),
            ]),
            "data_parallel_rank: expected an integer in 0..2^32, found the integer -2",
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(decode_value(value).unwrap_err().to_string(), expected);
    }
    assert_eq!(
        decode_value(Value::Array(vec![0.into(), Value::Array(vec![Value::Nil])]))
            .unwrap_err()
            .to_string(),
        "events[0]: expected an array or a map, found nil"
    );
}

#[test]
fn truncated_trailing_and_deep_input_is_rejected() {
    let mut bytes = Vec::new();
    rmpv::encode::write_value(
        &mut bytes,
        &Value::Array(vec![
            0.into(),
            Value::Array(vec![Value::Array(vec!["AllBlocksCleared".into()])]),
        ]),
    )
    .unwrap();
    assert!(decode_batch(&bytes, Engine::Vllm).is_ok());
    for cut in 0..bytes.len() {
        assert!(
            matches!(
                decode_batch(&bytes[..cut], Engine::Vllm),
                Err(DecodeError::Malformed { .. })
            ),
            "cut at {cut}"
        );
    }
    let mut trailing = bytes.clone();
    trailing.push(0xc0);
    assert_eq!(
        decode_batch(&trailing, Engine::Vllm),
        Err(DecodeError::TrailingBytes { count: 1 })
    );
    // 100,000 nested one-element arrays: rejected by the depth cap, not a stack overflow.
    let deep = vec![0x91; 100_000];
    assert!(matches!(
        decode_batch(&deep, Engine::Vllm),
        Err(DecodeError::Malformed { .. })
    ));
}

#[test]
fn length_prefixes_alone_allocate_nothing_large() {
    // Arrays, strings and bytes that claim 4 GiB but carry nothing.
    let liars: [&[u8]; 4] = [
        b"\xdd\xff\xff\xff\xff",
        b"\x92\x00\xdd\xff\xff\xff\xff",
        b"\x92\x00\x91\x92\xdb\xff\xff\xff\xff",
        b"\x92\x00\x91\x92\xabBlockStored\xc6\xff\xff\xff\xff",
    ];
    for bytes in liars {
        let before = CountingAlloc::live_bytes();
        CountingAlloc::reset_peak();
        assert!(decode_batch(bytes, Engine::Vllm).is_err());
        let peak = CountingAlloc::peak_bytes() - before;
        // Generous: other tests allocate concurrently; a length-sized buffer would be gigabytes.
        assert!(peak < 64 << 20, "{bytes:?} allocated {peak} bytes");
    }
}

#[test]
fn mapping_rejects_partial_blocks_and_filters_tiers() {
    let stored =
        |tokens: usize, blocks: u64, medium: Option<&str>, lora: (Option<i64>, Option<&str>)| {
            EngineEvent::BlockStored(BlockStored {
                block_hashes: (0..blocks).map(|b| SeqHash(100 + b)).collect(),
                parent_block_hash: None,
                token_ids: (0..tokens as u32).collect(),
                block_size: 16,
                lora_id: lora.0,
                medium: medium.map(str::to_owned),
                lora_name: lora.1.map(str::to_owned),
                group_idx: None,
                kv_cache_spec_kind: None,
                kv_cache_spec_sliding_window: None,
                extra_keys: None,
                cache_salt: None,
                lookahead_token_ids: None,
            })
        };
    let batch = KvEventBatch {
        ts: 0.0,
        events: vec![
            stored(40, 2, Some("GPU"), (None, None)),
            stored(48, 2, Some("GPU"), (None, None)),
            stored(32, 2, Some("cpu"), (None, None)),
            stored(32, 2, Some("gpu"), (Some(3), None)),
            stored(32, 2, Some("GPU"), (Some(3), Some("adapter"))),
        ],
        data_parallel_rank: None,
        unknown_events: 0,
    };
    let mapped = EventMapper::new(5, MapConfig::default()).map(&batch, 0);
    assert_eq!(
        mapped.rejected,
        vec![
            MapError::PartialBlocks {
                tokens: 40,
                blocks: 2,
                block_size: 16
            },
            MapError::PartialBlocks {
                tokens: 48,
                blocks: 2,
                block_size: 16
            },
            MapError::LoraWithoutName { lora_id: 3 },
        ]
    );
    assert_eq!(mapped.filtered, 1, "the CPU tier is filtered by default");
    assert_eq!(mapped.events.len(), 1);
    assert_eq!(mapped.events[0].worker, Worker::new(5, 0));
    assert_eq!(
        mapped.rejected[0].to_string(),
        "40 tokens are not 2 whole blocks of 16: event rejected"
    );

    let cpu_too = MapConfig {
        mediums: vec!["GPU".into(), "CPU".into()],
        ..MapConfig::default()
    };
    let mapped = EventMapper::new(5, cpu_too).map(&batch, 77);
    assert_eq!((mapped.filtered, mapped.events.len()), (0, 2));
    let ids: Vec<u64> = mapped.events.iter().map(|e| e.event_id).collect();
    assert_eq!(
        ids,
        vec![77, 77],
        "every event carries its batch's sequence number"
    );

    let cpu_only = MapConfig {
        mediums: vec!["CPU".into()],
        ..MapConfig::default()
    };
    let clear = KvEventBatch {
        ts: 0.0,
        events: vec![EngineEvent::AllBlocksCleared],
        data_parallel_rank: None,
        unknown_events: 0,
    };
    let mapped = EventMapper::new(5, cpu_only).map(&clear, 0);
    assert_eq!(mapped.events.len(), 1, "a clear is never filtered by tier");
}

#[test]
fn a_block_offloaded_to_a_kept_tier_stays_until_its_last_tier_removes_it() {
    let block = |seq: u64, parent: Option<u64>, medium: &str| {
        EngineEvent::BlockStored(BlockStored {
            block_hashes: vec![SeqHash(seq)],
            parent_block_hash: parent.map(SeqHash),
            token_ids: (seq as u32 * 16..seq as u32 * 16 + 16).collect(),
            block_size: 16,
            lora_id: None,
            medium: Some(medium.to_owned()),
            lora_name: None,
            group_idx: None,
            kv_cache_spec_kind: None,
            kv_cache_spec_sliding_window: None,
            extra_keys: None,
            cache_salt: None,
            lookahead_token_ids: None,
        })
    };
    let removed = |seq: u64, medium: &str| {
        EngineEvent::BlockRemoved(flash_indexer::ingest::BlockRemoved {
            block_hashes: vec![SeqHash(seq)],
            medium: Some(medium.to_owned()),
            group_idx: None,
        })
    };
    let batch = |events| KvEventBatch {
        ts: 0.0,
        events,
        data_parallel_rank: None,
        unknown_events: 0,
    };
    let both = MapConfig {
        mediums: vec!["GPU".into(), "CPU".into()],
        ..MapConfig::default()
    };
    let mapper = EventMapper::new(5, both);
    let index = NaiveIndexer::default();
    let apply = |events| {
        for event in mapper.map(&batch(events), 0).events {
            index.apply(&event).unwrap();
        }
    };
    let query: Vec<flash_indexer::LocalHash> = (1..=3u32)
        .flat_map(|b| hash::local_hashes(&(b * 16..b * 16 + 16).collect::<Vec<_>>(), 16))
        .collect();
    let depth = || {
        index
            .find_matches(&query)
            .get(Worker::new(5, 0))
            .unwrap_or(0)
    };
    // Blocks 1 and 2 on the GPU, 3 offloaded after 2; then 2 is offloaded too and leaves the GPU.
    apply(vec![block(1, None, "GPU"), block(2, Some(1), "GPU")]);
    apply(vec![block(3, Some(2), "CPU"), block(2, Some(1), "CPU")]);
    assert_eq!(depth(), 3);
    apply(vec![removed(2, "GPU")]);
    assert_eq!(depth(), 3, "the CPU still holds block 2");
    apply(vec![removed(2, "CPU")]);
    assert_eq!(depth(), 1, "no tier holds block 2");
}

#[test]
fn ranks_come_from_the_batch_or_are_fixed() {
    let cleared = |rank| KvEventBatch {
        ts: 0.0,
        events: vec![EngineEvent::AllBlocksCleared],
        data_parallel_rank: rank,
        unknown_events: 0,
    };
    // (rank policy, the batch's rank, the worker's rank)
    for (dp_rank, batch_rank, rank) in [
        (DpRank::FromBatch, Some(2), 2),
        (DpRank::FromBatch, None, 0),
        (DpRank::Fixed(4), Some(2), 4),
        (DpRank::FromBatchOr(4), Some(2), 2),
        (DpRank::FromBatchOr(4), None, 4),
    ] {
        let mapper = EventMapper::new(9, MapConfig::default()).with_dp_rank(dp_rank);
        assert_eq!(
            mapper.map(&cleared(batch_rank), 0).events[0].worker,
            Worker::new(9, rank),
            "{dp_rank:?} {batch_rank:?}"
        );
    }
}

/// Replays the committed corpus and saved crashes of fuzz target `target` through `run`.
fn replay_corpus(target: &str, run: fn(&[u8]) -> Result<(), String>) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs = 0;
    for dir in [format!("corpus/{target}"), format!("regressions/{target}")] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for path in entries.filter_map(Result::ok).map(|e| e.path()) {
            let data = std::fs::read(&path).unwrap();
            if let Err(divergence) = run(&data) {
                panic!("{}: {divergence}", path.display());
            }
            inputs += 1;
        }
    }
    assert!(inputs > 0, "the committed {target} corpus is missing");
}

#[test]
fn committed_decode_corpus_and_regressions_run_clean() {
    replay_corpus("decode", flash_indexer::testing::run_decode_input);
}

/// A `BlockStored` with no hashes, no tokens and the given block size, in `encoding`.
fn empty_stored_bytes(encoding: Encoding, block_size: u32) -> Vec<u8> {
    let event = encode_struct(
        encoding,
        Some("BlockStored"),
        vec![
            ("block_hashes", Value::Array(vec![])),
            ("parent_block_hash", Value::Nil),
            ("token_ids", Value::Array(vec![])),
            ("block_size", Value::from(block_size)),
            ("lora_id", Value::Nil),
            ("medium", Value::from("GPU")),
        ],
    );
    batch_bytes(encoding, vec![event], None)
}

#[test]
fn an_absurd_block_size_is_refused_before_anything_is_reserved() {
    // Issue 54: this event made the mapper reserve block_size × 4 bytes (16 GiB) and abort.
    for encoding in [Encoding::Array, Encoding::Map] {
        for block_size in [u32::MAX, (hash::MAX_BLOCK_SIZE + 1) as u32] {
            let bytes = empty_stored_bytes(encoding, block_size);
            let before = CountingAlloc::live_bytes();
            CountingAlloc::reset_peak();
            let batch = decode_batch(&bytes, Engine::Vllm).unwrap();
            let mapped = EventMapper::new(1, MapConfig::default()).map(&batch, 0);
            let peak = CountingAlloc::peak_bytes().saturating_sub(before);
            assert!(peak < 64 << 20, "{encoding:?} {block_size}: {peak} bytes");
            assert_eq!(
                mapped.rejected,
                vec![MapError::BlockSizeTooLarge { block_size }]
            );
            assert!(mapped.events.is_empty());
            assert!(mapped.rejected[0].to_string().contains("over the largest"));
        }
        // The largest accepted size maps (to nothing: the event has no blocks).
        let bytes = empty_stored_bytes(encoding, hash::MAX_BLOCK_SIZE as u32);
        let batch = decode_batch(&bytes, Engine::Vllm).unwrap();
        let mapped = EventMapper::new(1, MapConfig::default()).map(&batch, 0);
        assert!(mapped.rejected.is_empty());
        let index = NaiveIndexer::default();
        for event in &mapped.events {
            index.apply(event).unwrap();
        }
    }
}

#[test]
fn an_endpoint_with_a_nul_byte_is_refused_before_any_socket() {
    use flash_indexer::ingest::{EngineEndpoint, IngestError, Subscriber, SubscriberConfig};
    use flash_indexer::pool::{PoolConfig, WriterPool};
    use std::sync::Arc;

    // Issue 54: ZeroMQ's binding panicked on these (`CString::new(..).unwrap()`).
    let pool = Arc::new(WriterPool::new(
        Arc::new(NaiveIndexer::default()),
        PoolConfig::default(),
    ));
    let endpoints = [
        EngineEndpoint::new("tcp://127.0.0.1:5557\0").with_worker(1),
        EngineEndpoint::new("tcp://127.0.0.1:5557")
            .with_replay("tcp://127.0.0.1:5558\0")
            .with_worker(1),
        EngineEndpoint::bind("ipc:///tmp/x\0y").with_worker(1),
    ];
    for endpoint in endpoints {
        let error = Subscriber::spawn(Arc::clone(&pool), [endpoint], SubscriberConfig::default())
            .expect_err("refused");
        assert!(
            matches!(&error, IngestError::BadEndpoint { reason, .. } if reason.contains("NUL")),
            "{error}"
        );
    }
}

#[test]
fn committed_ingest_corpus_and_regressions_run_clean() {
    replay_corpus("ingest", flash_indexer::testing::run_ingest_input);
}

/// A `BlockStored` in vLLM 0.33's field order, with per-block `extra_keys` and any other
/// trailing fields.
fn keyed_stored(
    encoding: Encoding,
    hashes: &[u64],
    tokens: &[u32],
    lora_name: Option<&str>,
    extra_keys: Value,
    trailing: Vec<(&'static str, Value)>,
) -> Value {
    let mut fields = vec![
        (
            "block_hashes",
            Value::Array(hashes.iter().map(|&h| Value::from(h)).collect()),
        ),
        ("parent_block_hash", Value::Nil),
        (
            "token_ids",
            Value::Array(tokens.iter().map(|&t| Value::from(t)).collect()),
        ),
        ("block_size", Value::from(16)),
        ("lora_id", lora_name.map_or(Value::Nil, |_| Value::from(1))),
        ("medium", Value::from("GPU")),
        ("lora_name", lora_name.map_or(Value::Nil, Value::from)),
        ("extra_keys", extra_keys),
    ];
    fields.extend(trailing);
    encode_struct(encoding, Some("BlockStored"), fields)
}

fn mm_pair(identifier: &str, offset: i64) -> Value {
    Value::Array(vec![Value::from(identifier), Value::from(offset)])
}

/// Maps `event` as worker `worker`'s engine would publish it (in `encoding`) and applies what
/// comes out to `index`; nothing may be rejected.
fn map_and_apply(index: &NaiveIndexer, worker: u64, encoding: Encoding, event: Value) {
    let batch = decode_batch(&batch_bytes(encoding, vec![event], None), Engine::Vllm).unwrap();
    let mapped = EventMapper::new(worker, MapConfig::default()).map(&batch, 0);
    assert_eq!(mapped.rejected, vec![], "{encoding:?} worker {worker}");
    for event in &mapped.events {
        index.apply(event).unwrap();
    }
}

/// How deep `worker` matches `tokens` (blocks of 16) queried with `features`.
fn depth_with(
    index: &NaiveIndexer,
    tokens: &[u32],
    features: flash_indexer::hash::Features<'_>,
    worker: u64,
) -> u32 {
    let query = hash::local_hashes_with_features(tokens, 16, &features);
    (index.find_matches(&query))
        .get(Worker::new(worker, 0))
        .unwrap_or(0)
}

#[test]
fn extra_keys_key_blocks_as_vllm_does() {
    use flash_indexer::hash::{Features, MmItem, Salt};

    let tokens: Vec<u32> = (500..564).collect();
    let image = [MmItem {
        identifier: "image-a",
        offset: 20,
        length: 24,
    }];
    for encoding in [Encoding::Array, Encoding::Map] {
        // Worker 1: an image over blocks 1 and 2, under LoRA `adapter`, with a prompt-embeds
        // digest on block 3 and vLLM 0.33's trailing fields after the keys. Worker 2: a salted
        // request. Worker 3: SGLang's top-level salt.
        let lora = Value::from("adapter");
        let image_keys = Value::Array(vec![
            Value::Array(vec![lora.clone()]),
            Value::Array(vec![lora.clone(), mm_pair("image-a", 4)]),
            Value::Array(vec![lora.clone(), mm_pair("image-a", -12)]),
            Value::Array(vec![lora, Value::Binary(vec![7; 32])]),
        ]);
        let trailing = vec![
            ("group_idx", Value::from(0)),
            ("kv_cache_spec_kind", Value::from("full_attention")),
        ];
        let salted_keys = Value::Array(vec![
            Value::Array(vec![Value::from("tenant-x")]),
            Value::Nil,
            Value::Nil,
            Value::Nil,
        ]);
        let sglang = keyed_stored(
            encoding,
            &[31, 32, 33, 34],
            &tokens,
            None,
            Value::Nil,
            vec![("cache_salt", Value::from("tenant-x"))],
        );
        let events = [
            (
                1,
                keyed_stored(
                    encoding,
                    &[1, 2, 3, 4],
                    &tokens,
                    Some("adapter"),
                    image_keys,
                    trailing,
                ),
            ),
            (
                2,
                keyed_stored(
                    encoding,
                    &[11, 12, 13, 14],
                    &tokens,
                    None,
                    salted_keys,
                    vec![],
                ),
            ),
            (3, sglang),
        ];
        let index = NaiveIndexer::default();
        for (worker, event) in events {
            if worker == 3 && matches!(encoding, Encoding::Array) {
                continue; // SGLang's `cache_salt` is read by name: map encoding only.
            }
            map_and_apply(&index, worker, encoding, event);
        }
        let depth =
            |features: Features<'_>, worker: u64| depth_with(&index, &tokens, features, worker);
        let lora = Salt::lora("adapter");
        let with_image = Features {
            salt: lora,
            mm: &image,
            ..Features::default()
        };
        // Blocks 0-2 carry what a query can say; block 3's prompt embeddings it cannot.
        assert_eq!(depth(with_image, 1), 3, "{encoding:?}");
        let other = [MmItem {
            identifier: "image-b",
            ..image[0]
        }];
        assert_eq!(
            depth(
                Features {
                    mm: &other,
                    ..with_image
                },
                1
            ),
            1
        );
        let later = [MmItem {
            offset: 21,
            ..image[0]
        }];
        assert_eq!(
            depth(
                Features {
                    mm: &later,
                    ..with_image
                },
                1
            ),
            1
        );
        assert_eq!(
            depth(
                Features {
                    salt: lora,
                    ..Features::default()
                },
                1
            ),
            1
        );
        assert_eq!(
            depth(
                Features {
                    mm: &image,
                    ..Features::default()
                },
                1
            ),
            0
        );
        let salted_workers: &[u64] = match encoding {
            Encoding::Array => &[2],
            Encoding::Map => &[2, 3],
        };
        for &worker in salted_workers {
            let salted = Features {
                cache_salt: Some("tenant-x"),
                ..Features::default()
            };
            assert_eq!(depth(salted, worker), 4, "{encoding:?} worker {worker}");
            let other = Features {
                cache_salt: Some("tenant-y"),
                ..Features::default()
            };
            assert_eq!(depth(other, worker), 0);
            assert_eq!(depth(Features::default(), worker), 0);
        }
    }
}

#[test]
fn a_salt_marked_by_dynamo_is_its_namespace_on_every_block() {
    use flash_indexer::hash::{Features, Salt};

    let tokens: Vec<u32> = (700..764).collect();
    let marked = |first: Vec<Value>| {
        Value::Array(vec![
            Value::Array(first),
            Value::Nil,
            Value::Nil,
            Value::Nil,
        ])
    };
    let events = [
        (
            1,
            None,
            marked(vec![Value::from("dynamo-cache-salt:tenant-a")]),
        ),
        (
            2,
            Some("adapter"),
            marked(vec![
                Value::from("adapter"),
                Value::from("dynamo-cache-salt:tenant-a"),
            ]),
        ),
        // The bare prefix names no namespace: vLLM's salt, as any other string.
        (3, None, marked(vec![Value::from("dynamo-cache-salt:")])),
    ];
    let index = NaiveIndexer::default();
    for (worker, lora, keys) in events {
        let event = keyed_stored(
            Encoding::Map,
            &[
                worker * 10,
                worker * 10 + 1,
                worker * 10 + 2,
                worker * 10 + 3,
            ],
            &tokens,
            lora,
            keys,
            vec![],
        );
        map_and_apply(&index, worker, Encoding::Map, event);
    }
    let depth = |features: Features<'_>, worker: u64| depth_with(&index, &tokens, features, worker);
    let namespace = |lora_name, cache_namespace| Features {
        salt: Salt {
            lora_name,
            cache_namespace,
        },
        ..Features::default()
    };
    assert_eq!(depth(namespace(None, Some("tenant-a")), 1), 4);
    assert_eq!(depth(namespace(None, Some("tenant-b")), 1), 0);
    assert_eq!(depth(namespace(None, None), 1), 0);
    let vllm_salt = Features {
        cache_salt: Some("dynamo-cache-salt:tenant-a"),
        ..Features::default()
    };
    assert_eq!(depth(vllm_salt, 1), 0);
    assert_eq!(depth(namespace(Some("adapter"), Some("tenant-a")), 2), 4);
    assert_eq!(depth(namespace(None, Some("tenant-a")), 2), 0);
    let bare = Features {
        cache_salt: Some("dynamo-cache-salt:"),
        ..Features::default()
    };
    assert_eq!(depth(bare, 3), 4);
}

#[test]
fn extra_keys_of_unknown_shapes_reject_their_event() {
    let tokens: Vec<u32> = (0..32).collect();
    let cases = [
        (
            None,
            Value::Array(vec![Value::Nil]),
            "1 entries for 2 blocks",
        ),
        (
            None,
            Value::Array(vec![Value::Array(vec![Value::from(1.5)]), Value::Nil]),
            "not a key vLLM publishes",
        ),
        (
            None,
            Value::Array(vec![
                Value::Array(vec![Value::from("salt"), Value::from("again")]),
                Value::Nil,
            ]),
            "second bare string",
        ),
        (
            Some("adapter"),
            Value::Array(vec![Value::Array(vec![Value::from("other")]), Value::Nil]),
            "is not the event's lora_name",
        ),
        (
            None,
            Value::Array(vec![
                Value::Array(vec![Value::Array(vec![
                    Value::from("id"),
                    Value::from("x"),
                ])]),
                Value::Nil,
            ]),
            "not a key vLLM publishes",
        ),
    ];
    for (lora, keys, says) in cases {
        let event = keyed_stored(Encoding::Array, &[1, 2], &tokens, lora, keys, vec![]);
        let batch = decode_batch(
            &batch_bytes(Encoding::Array, vec![event], None),
            Engine::Vllm,
        )
        .unwrap();
        let mapped = EventMapper::new(1, MapConfig::default()).map(&batch, 0);
        assert!(mapped.events.is_empty(), "{says}");
        let [MapError::ExtraKeys { .. }] = mapped.rejected.as_slice() else {
            panic!("{says}: {:?}", mapped.rejected);
        };
        assert!(
            mapped.rejected[0].to_string().contains(says),
            "{}",
            mapped.rejected[0]
        );
    }
    // Extra keys that are not an array of entries fail the batch's decoding.
    let event = keyed_stored(
        Encoding::Map,
        &[1, 2],
        &tokens,
        None,
        Value::from(3),
        vec![],
    );
    let error = decode_batch(&batch_bytes(Encoding::Map, vec![event], None), Engine::Vllm);
    assert!(
        matches!(error, Err(DecodeError::Invalid { .. })),
        "{error:?}"
    );
}

#[test]
fn blocks_hashed_over_lookahead_tokens_are_keyed_by_them() {
    use flash_indexer::hash::{Features, MmItem};

    // vLLM 0.33 with an EAGLE drafter hashes each block over the token after it too
    // (`num_hash_lookahead_tokens` = 1), and hashes a block only once that token exists. Its
    // event carries the block's tokens, `lookahead_token_ids` (one list per block) and extra
    // keys taken over the block and its lookahead: here an image whose placeholders start at
    // token 32, the first token after block 1.
    let request: Vec<u32> = (0..40).collect();
    let image = [MmItem {
        identifier: "image-a",
        offset: 32,
        length: 8,
    }];
    let trailing = |lookahead: Value| {
        vec![
            ("group_idx", Value::from(0)),
            ("kv_cache_spec_kind", Value::Nil),
            ("kv_cache_spec_sliding_window", Value::Nil),
            ("locality", Value::Nil),
            ("ownership", Value::Nil),
            ("session_id", Value::Nil),
            ("lookahead_token_ids", lookahead),
        ]
    };
    let lists = |ends: &[u32]| {
        Value::Array(
            (ends.iter())
                .map(|&end| Value::Array(vec![Value::from(end)]))
                .collect(),
        )
    };
    let keys = Value::Array(vec![Value::Nil, Value::Array(vec![mm_pair("image-a", 16)])]);
    for encoding in [Encoding::Array, Encoding::Map] {
        let index = NaiveIndexer::default();
        let event = keyed_stored(
            encoding,
            &[1, 2],
            &request[..32],
            None,
            keys.clone(),
            trailing(lists(&[16, 32])),
        );
        map_and_apply(&index, 1, encoding, event);
        let depth = |tokens: &[u32], features| depth_with(&index, tokens, features, 1);
        let eagle = Features {
            mm: &image,
            lookahead: 1,
            ..Features::default()
        };
        // The request hashed as vLLM hashes it matches both blocks.
        assert_eq!(depth(&request, eagle), 2, "{encoding:?}");
        // Without the token after block 1 (a prompt that ends there), vLLM cannot hash block 1,
        // and neither does the router.
        assert_eq!(depth(&request[..32], eagle), 1, "{encoding:?}");
        // Another token after block 1 is another block 1 to vLLM: no over-count.
        let mut other = request.clone();
        other[32] = 999;
        assert_eq!(depth(&other, eagle), 1, "{encoding:?}");
        // Without its image, block 1 is another block too.
        let no_image = Features {
            lookahead: 1,
            ..Features::default()
        };
        assert_eq!(depth(&request, no_image), 1, "{encoding:?}");
        // A router that does not know about lookahead hashing matches nothing: an under-count.
        let plain = Features {
            mm: &image,
            ..Features::default()
        };
        assert_eq!(depth(&request, plain), 0, "{encoding:?}");

        // Lists that are not one per block reject the event, with a reason.
        let event = keyed_stored(
            encoding,
            &[1, 2],
            &request[..32],
            None,
            Value::Nil,
            trailing(lists(&[16])),
        );
        let batch = decode_batch(&batch_bytes(encoding, vec![event], None), Engine::Vllm).unwrap();
        let mapped = EventMapper::new(1, MapConfig::default()).map(&batch, 0);
        assert!(mapped.events.is_empty(), "{encoding:?}");
        let [MapError::ExtraKeys { .. }] = mapped.rejected.as_slice() else {
            panic!("{encoding:?}: {:?}", mapped.rejected);
        };
        assert!(
            (mapped.rejected[0].to_string()).contains("1 lookahead_token_ids lists for 2 blocks"),
            "{}",
            mapped.rejected[0]
        );
        // Lists of something else than token ids fail the batch's decoding.
        let event = keyed_stored(
            encoding,
            &[1, 2],
            &request[..32],
            None,
            Value::Nil,
            trailing(Value::Array(vec![Value::from("x"), Value::from("y")])),
        );
        let error = decode_batch(&batch_bytes(encoding, vec![event], None), Engine::Vllm);
        assert!(
            matches!(error, Err(DecodeError::Invalid { .. })),
            "{encoding:?}: {error:?}"
        );
    }
}
