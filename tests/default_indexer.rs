//! `DefaultIndexer` exists in every build with a layout, and is the layout the features
//! document: the first enabled of `positional`, `array`, `radix`, unless `default-radix` or
//! `default-array` picks one (`default-radix` wins). CI runs this under every single-layout and
//! `default-*` combination.
#![cfg(any(feature = "positional", feature = "array", feature = "radix"))]

/// The layout type the features document, by name.
fn documented() -> &'static str {
    if cfg!(feature = "default-radix") {
        "RadixTree"
    } else if cfg!(feature = "default-array") {
        "PositionArray"
    } else if cfg!(feature = "positional") {
        "PositionalMap"
    } else if cfg!(feature = "array") {
        "PositionArray"
    } else {
        "RadixTree"
    }
}

#[test]
fn default_indexer_is_the_documented_layout() {
    use flash_indexer::{DefaultIndexer, KvIndex, LocalHash, SeqHash, Worker};

    let name = std::any::type_name::<DefaultIndexer>();
    assert!(
        name.contains(documented()),
        "DefaultIndexer is {name}, documented: {}",
        documented()
    );
    // And it works as an index.
    let index = DefaultIndexer::default();
    let w = Worker::new(1, 0);
    let block = flash_indexer::Block::new(LocalHash(5), SeqHash(6));
    index
        .apply(&flash_indexer::Event::stored(w, 0, None, vec![block]))
        .unwrap();
    assert_eq!(index.find_matches(&[LocalHash(5)]).get(w), Some(1));
}
