//! The fast path against `serde_json`: whenever the scanner answers, `serde_json` decodes the same
//! bytes to the same event; and on the publishers' shapes it does answer.

use super::{DynamoEvent, KvCacheEvent, fast, parse};
use flash_indexer::{Block, EventKind, LocalHash, SeqHash};
use proptest::prelude::*;

fn by_serde(bytes: &[u8]) -> Result<DynamoEvent, String> {
    serde_json::from_slice::<KvCacheEvent>(bytes)
        .map(DynamoEvent::from)
        .map_err(|e| e.to_string())
}

/// The rule the scanner lives by.
fn agrees(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Some(event) = fast::parse(bytes) {
        prop_assert_eq!(
            Ok(event),
            by_serde(bytes),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    Ok(())
}

#[test]
fn reads_what_python_and_dynamo_write() {
    let python = br#"{"event_id": 3, "data": {"stored": {"parent_hash": null, "blocks": [{"block_hash": 18446744073709551615, "tokens_hash": 0}, {"block_hash": 7, "tokens_hash": 8}]}}, "dp_rank": 2}"#;
    let rust = br#"{"event_id":3,"data":{"stored":{"parent_hash":null,"blocks":[{"tokens_hash":0,"block_hash":18446744073709551615},{"block_hash":7,"tokens_hash":8}]}},"dp_rank":2}"#;
    let expected = DynamoEvent {
        event_id: 3,
        dp_rank: 2,
        data: EventKind::Stored {
            parent: None,
            blocks: vec![
                Block::new(LocalHash(0), SeqHash(u64::MAX)),
                Block::new(LocalHash(8), SeqHash(7)),
            ],
        },
    };
    for bytes in [&python[..], &rust[..]] {
        assert_eq!(fast::parse(bytes).as_ref(), Some(&expected));
        assert_eq!(by_serde(bytes).as_ref(), Ok(&expected));
    }
    let removed = b"{\"data\": {\"removed\": {\"block_hashes\": [1, 2]}}}";
    assert_eq!(
        fast::parse(removed),
        Some(DynamoEvent {
            event_id: 0,
            dp_rank: 0,
            data: EventKind::Removed {
                blocks: vec![SeqHash(1), SeqHash(2)],
            },
        })
    );
    let cleared = b" {\"event_id\": 9, \"data\": \"cleared\"}\n";
    assert_eq!(
        fast::parse(cleared).map(|e| e.data),
        Some(EventKind::Cleared)
    );
}

#[test]
fn leaves_everything_else_to_serde_json() {
    let cases: [&[u8]; 12] = [
        br#"{"data": {"stored": {"blocks": [{"block_hash": 1, "tokens_hash": 2, "mm_extra_info": null}]}}}"#,
        br#"{"data": {"stored": {"blocks": [{"block\u005fhash": 1, "tokens_hash": 2}]}}}"#,
        br#"{"data": {"removed": {"block_hashes": [1.0]}}}"#,
        br#"{"data": {"removed": {"block_hashes": [1e3]}}}"#,
        br#"{"data": {"removed": {"block_hashes": [-1]}}}"#,
        br#"{"data": {"removed": {"block_hashes": [01]}}}"#,
        br#"{"data": {"removed": {"block_hashes": [18446744073709551616]}}}"#,
        br#"{"data": {"removed": {"block_hashes": [1,]}}}"#,
        br#"{"data": "cleared", "dp_rank": 4294967296}"#,
        br#"{"data": "cleared", "data": "cleared"}"#,
        br#"{"data": {"cleared": null}}"#,
        br#"{"data": "cleared"} x"#,
    ];
    for bytes in cases {
        assert_eq!(
            fast::parse(bytes),
            None,
            "{}",
            String::from_utf8_lossy(bytes)
        );
        agrees(bytes).unwrap();
    }
    // Bytes serde_json accepts still decode, the slow way.
    assert_eq!(parse(cases[0]).unwrap().event_id, 0);
    assert_eq!(
        parse(cases[10]).unwrap().data,
        EventKind::Cleared,
        "a unit variant in map form"
    );
    // And the error of bad bytes is serde_json's.
    let error = parse(cases[4]).unwrap_err().to_string();
    assert!(error.contains("invalid value"), "{error}");
}

/// A JSON value, to render with chosen whitespace and spellings.
#[derive(Clone, Debug)]
enum Json {
    /// A number or literal, spelled as given.
    Raw(String),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn render(&self, spaces: &[&str], out: &mut String, at: &mut usize) {
        let space = |out: &mut String, at: &mut usize| {
            out.push_str(spaces[*at % spaces.len()]);
            *at += 1;
        };
        match self {
            Json::Raw(text) => out.push_str(text),
            Json::Str(text) => {
                out.push('"');
                out.push_str(text);
                out.push('"');
            }
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    space(out, at);
                    item.render(spaces, out, at);
                    space(out, at);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    space(out, at);
                    out.push('"');
                    out.push_str(key);
                    out.push('"');
                    space(out, at);
                    out.push(':');
                    space(out, at);
                    value.render(spaces, out, at);
                    space(out, at);
                }
                out.push('}');
            }
        }
    }
}

/// Numbers in every spelling a publisher or a careless one might write; the plain ones most.
fn number() -> impl Strategy<Value = Json> {
    prop_oneof![
        8 => any::<u64>().prop_map(|n| Json::Raw(n.to_string())),
        2 => (0u64..10).prop_map(|n| Json::Raw(n.to_string())),
        1 => Just(Json::Raw(u64::MAX.to_string())),
        1 => prop::sample::select(vec![
            "18446744073709551616", "99999999999999999999", "00", "01", "-0", "-1", "1.0", "1e2",
            "1E2", "0.5", "null", "true", "\"1\"", "100000000000000000000",
        ])
        .prop_map(|s| Json::Raw(s.to_owned())),
    ]
}

/// A key, now and then misspelled, escaped or unknown.
fn key(name: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        12 => Just(name.to_owned()),
        1 => Just(name.replacen('_', "\\u005f", 1)),
        1 => Just(format!("{name}x")),
        1 => Just(name.to_uppercase()),
    ]
}

/// An object of `members`, shuffled, each now and then left out or given twice, with an unknown
/// member now and then.
fn object(members: Vec<BoxedStrategy<(String, Json)>>) -> impl Strategy<Value = Json> {
    let each: Vec<_> = members
        .into_iter()
        .map(|m| {
            prop_oneof![1 => Just(0usize), 10 => Just(1), 1 => Just(2)]
                .prop_flat_map(move |n| prop::collection::vec(m.clone(), n))
        })
        .collect();
    (
        each,
        prop::option::weighted(0.05, number().prop_map(|n| ("extra".to_owned(), n))),
    )
        .prop_flat_map(|(each, extra)| {
            let mut all: Vec<(String, Json)> = each.into_iter().flatten().collect();
            all.extend(extra);
            Just(all).prop_shuffle()
        })
        .prop_map(Json::Object)
}

fn member(
    name: &'static str,
    value: impl Strategy<Value = Json> + 'static,
) -> BoxedStrategy<(String, Json)> {
    (key(name), value).boxed()
}

fn event() -> impl Strategy<Value = Json> {
    let block = object(vec![
        member("block_hash", number()),
        member("tokens_hash", number()),
    ]);
    let parent = prop_oneof![1 => Just(Json::Raw("null".to_owned())), 2 => number()];
    let stored = object(vec![
        member("parent_hash", parent),
        member(
            "blocks",
            prop::collection::vec(block, 0..6).prop_map(Json::Array),
        ),
    ]);
    let removed = object(vec![member(
        "block_hashes",
        prop::collection::vec(number(), 0..6).prop_map(Json::Array),
    )]);
    let data = prop_oneof![
        3 => object(vec![member("stored", stored)]),
        2 => object(vec![member("removed", removed)]),
        1 => Just(Json::Str("cleared".to_owned())),
        1 => Just(Json::Str("clear".to_owned())),
    ];
    object(vec![
        member("event_id", number()),
        member("data", data),
        member("dp_rank", number()),
    ])
}

fn spaces() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(
        prop::sample::select(vec!["", "", "", " ", "\n  ", "\t", "\r\n"]),
        1..8,
    )
}

fn render(json: &Json, spaces: &[&str]) -> Vec<u8> {
    let mut out = String::new();
    json.render(spaces, &mut out, &mut 0);
    out.into_bytes()
}

/// Bytes that matter to JSON, to mutate events with.
const MUTATIONS: &[u8] = b"{}[]\",: \n\t\x0c\x00\xff0123456789-.eEnul\\x";

/// An event as publishers write it (known keys once each, plain numbers, any order), and what
/// it means.
fn publishers_event() -> impl Strategy<Value = (Json, DynamoEvent)> {
    let raw = |n: u64| Json::Raw(n.to_string());
    let stored = (
        prop::collection::vec(any::<(u64, u64)>(), 0..40),
        any::<Option<u64>>(),
    )
        .prop_map(move |(blocks, parent)| {
            let blocks_json = blocks
                .iter()
                .map(|&(seq, local)| {
                    Json::Object(vec![
                        ("block_hash".to_owned(), raw(seq)),
                        ("tokens_hash".to_owned(), raw(local)),
                    ])
                })
                .collect();
            let parent_json = parent.map_or(Json::Raw("null".to_owned()), raw);
            let json = Json::Object(vec![(
                "stored".to_owned(),
                Json::Object(vec![
                    ("parent_hash".to_owned(), parent_json),
                    ("blocks".to_owned(), Json::Array(blocks_json)),
                ]),
            )]);
            let blocks = blocks
                .iter()
                .map(|&(seq, local)| Block::new(LocalHash(local), SeqHash(seq)))
                .collect();
            let parent = parent.map(SeqHash);
            (json, EventKind::Stored { parent, blocks })
        });
    let removed = prop::collection::vec(any::<u64>(), 0..40).prop_map(move |seqs| {
        let json = Json::Object(vec![(
            "removed".to_owned(),
            Json::Object(vec![(
                "block_hashes".to_owned(),
                Json::Array(seqs.iter().copied().map(raw).collect()),
            )]),
        )]);
        (
            json,
            EventKind::Removed {
                blocks: seqs.into_iter().map(SeqHash).collect(),
            },
        )
    });
    let cleared = Just((Json::Str("cleared".to_owned()), EventKind::Cleared));
    let data = prop_oneof![3 => stored, 2 => removed, 1 => cleared];
    (data, any::<u64>(), any::<u32>(), any::<bool>()).prop_map(
        move |((data_json, data), event_id, dp_rank, rust_order)| {
            let mut members = vec![
                ("event_id".to_owned(), raw(event_id)),
                ("data".to_owned(), data_json),
                ("dp_rank".to_owned(), raw(u64::from(dp_rank))),
            ];
            if !rust_order {
                members.reverse();
            }
            let event = DynamoEvent {
                event_id,
                dp_rank,
                data,
            };
            (Json::Object(members), event)
        },
    )
}

/// Edits `bytes` at chosen places with bytes that matter to JSON.
fn mutate(bytes: &mut Vec<u8>, edits: Vec<(prop::sample::Index, u8, u8)>) {
    for (at, byte, how) in edits {
        let at = at.index(bytes.len() + 1);
        match how {
            0 => bytes.insert(at, byte),
            1 if at < bytes.len() => bytes[at] = byte,
            _ if at < bytes.len() => {
                bytes.remove(at);
            }
            _ => bytes.push(byte),
        }
    }
}

fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, u8)>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::sample::select(MUTATIONS),
            0..3u8,
        ),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn answers_only_what_serde_json_answers(json in event(), spaces in spaces()) {
        agrees(&render(&json, &spaces))?;
    }

    #[test]
    fn answers_only_what_serde_json_answers_after_mutations(
        json in prop_oneof![event(), publishers_event().prop_map(|(json, _)| json)],
        spaces in spaces(),
        edits in edits(),
    ) {
        let mut bytes = render(&json, &spaces);
        mutate(&mut bytes, edits);
        agrees(&bytes)?;
    }

    /// Publishers' events take the fast path, in any whitespace: the properties above are not
    /// met by a scanner that never answers.
    #[test]
    fn takes_the_fast_path_on_publishers_events(
        (json, expected) in publishers_event(),
        spaces in spaces(),
    ) {
        let bytes = render(&json, &spaces);
        prop_assert_eq!(fast::parse(&bytes), Some(expected.clone()));
        prop_assert_eq!(by_serde(&bytes), Ok(expected));
    }
}
