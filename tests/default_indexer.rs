//! `DefaultIndexer` exists in every build with a layout, and is the layout the features
//! document: the first enabled of `positional`, `array`, `radix`, unless `default-radix` or
//! `default-array` picks one (`default-radix` wins). The type assertion below is checked by CI
//! under every single-layout and `default-*` combination (`cargo check --test default_indexer`);
//! the test runs with the default features.
#![cfg(any(feature = "positional", feature = "array", feature = "radix"))]

/// The layout the features document.
#[cfg(feature = "default-radix")]
type Documented = flash_indexer::RadixIndexer;
#[cfg(all(feature = "default-array", not(feature = "default-radix")))]
type Documented = flash_indexer::ArrayIndexer;
#[cfg(all(
    feature = "positional",
    not(any(feature = "default-radix", feature = "default-array"))
))]
type Documented = flash_indexer::PositionalIndexer;
#[cfg(all(
    feature = "array",
    not(any(
        feature = "positional",
        feature = "default-radix",
        feature = "default-array"
    ))
))]
type Documented = flash_indexer::ArrayIndexer;
#[cfg(all(
    feature = "radix",
    not(any(
        feature = "positional",
        feature = "array",
        feature = "default-radix",
        feature = "default-array"
    ))
))]
type Documented = flash_indexer::RadixIndexer;

/// Compiles only if `DefaultIndexer` is the documented layout, so `cargo check --test
/// default_indexer` proves it for a feature set without building the test.
const _: fn(flash_indexer::DefaultIndexer) -> Documented = |index| index;

#[test]
fn default_indexer_is_the_documented_layout_and_works() {
    use flash_indexer::{DefaultIndexer, KvIndex, LocalHash, SeqHash, Worker};

    assert_eq!(
        std::any::type_name::<DefaultIndexer>(),
        std::any::type_name::<Documented>()
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
