//! The fuzz targets' checks (fuzz/checks.rs) in the regular suite: every seed and every input a
//! fuzzer ever crashed on (fuzz/artifacts/, when present) replayed, then random bytes and seeds
//! mutated at random (insertions, replacements, deletions, cut and doubled stretches). The
//! coverage-guided runs themselves are `scripts/fuzz.sh` (SQLCRON_FUZZ_SECS in the suite).

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

use proptest::prelude::*;

type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 3] = [
    ("schedule", checks::schedule),
    ("config", checks::config),
    ("row", checks::row),
];

/// The files of `fuzz/seeds/TARGET` and `fuzz/artifacts/TARGET`, sorted by path.
fn inputs(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut paths: Vec<_> = ["seeds", "artifacts"]
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d).join(target)).ok())
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// One edit of an input: where (a fraction of its length), what, and with which bytes.
#[derive(Debug, Clone)]
enum Edit {
    Insert(f64, Vec<u8>),
    Replace(f64, u8),
    Delete(f64, usize),
    Double(f64, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to the parsers more often than chance would pick them.
    let byte = prop_oneof![
        any::<u8>(),
        prop::sample::select(b"0123456789*/,-?LW#H@ \t\n\0\"'=[]{}.:".to_vec()),
    ];
    let at = 0.0..1.0f64;
    prop_oneof![
        (at.clone(), prop::collection::vec(byte.clone(), 1..8))
            .prop_map(|(a, b)| Edit::Insert(a, b)),
        (at.clone(), byte).prop_map(|(a, b)| Edit::Replace(a, b)),
        (at.clone(), 1..64usize).prop_map(|(a, n)| Edit::Delete(a, n)),
        (at, 1..64usize).prop_map(|(a, n)| Edit::Double(a, n)),
    ]
}

fn apply(mut input: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let at = |f: f64| ((input.len() as f64 * f) as usize).min(input.len());
        match e {
            Edit::Insert(f, bytes) => {
                let i = at(*f);
                input.splice(i..i, bytes.iter().copied());
            }
            Edit::Replace(f, b) => {
                let i = at(*f);
                if i < input.len() {
                    input[i] = *b;
                }
            }
            Edit::Delete(f, n) => {
                let i = at(*f);
                let end = (i + n).min(input.len());
                input.drain(i..end);
            }
            Edit::Double(f, n) => {
                let i = at(*f);
                let end = (i + n).min(input.len());
                let copy = input[i..end].to_vec();
                input.splice(end..end, copy);
            }
        }
    }
    input
}

#[test]
fn every_seed_and_artifact_passes_its_check() {
    for (target, check) in TARGETS {
        let inputs = inputs(target);
        assert!(!inputs.is_empty(), "no seeds for {target}");
        for input in inputs {
            check(&input);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        // Printable text with NULs (the row's column separator) and newlines.
        "[ -~\n\x00]{0,256}".prop_map(String::into_bytes),
    ]) {
        for (_, check) in TARGETS {
            check(&bytes);
        }
    }

    #[test]
    fn mutated_seeds_never_panic(
        target in 0..TARGETS.len(),
        pick in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..12),
    ) {
        let (name, check) = TARGETS[target];
        let seeds = inputs(name);
        let input = apply(seeds[pick.index(seeds.len())].clone(), &edits);
        check(&input);
    }
}
