//! The house in layers, kept: every `crate::` path in `src/` is checked against the table of
//! allowed imports below, no two modules import each other (directly or through others), and no
//! room grows past [`MAX_LINES`] lines of code unless docs/architecture.md says why it must be
//! one piece. docs/architecture.md explains the layers; this file is where they are enforced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each layer (a folder of `src/`) and the layers it may import. A layer may always import
/// itself. Everything else is refused.
const ALLOWED: &[(&str, &[&str])] = &[
    // Pure time maths: expressions, zones, DST, next fire. Knows nothing else.
    ("schedule", &[]),
    // The nouns and the pure decisions.
    ("model", &["schedule"]),
    // TOML and secrets → validated settings.
    ("config", &["model", "schedule"]),
    // All SQL; takes plain values.
    ("store", &["model", "schedule"]),
    // Running one thing on this host; no database.
    ("exec", &["model"]),
    // The one place where store, exec and the decisions meet. It tells the host what it does
    // through its own interfaces (metrics, the service manager), never through `service`.
    ("daemon", &["model", "schedule", "config", "store", "exec"]),
    // What the host sees: systemd, the metrics and health listener, the web pages. On top of
    // the daemon, beside the commands.
    (
        "service",
        &["model", "schedule", "config", "store", "daemon"],
    ),
    // The commands, on top of everything.
    (
        "cli",
        &[
            "model", "schedule", "config", "store", "exec", "service", "daemon",
        ],
    ),
];

/// The most lines of code (tests apart) a file may hold without a stated reason.
const MAX_LINES: usize = 600;

/// One `crate::` path found in a file.
#[derive(Debug, Clone)]
struct Import {
    file: String,
    line: usize,
    /// The path's segments after `crate`, e.g. `["store", "Dialect"]`.
    path: Vec<String>,
}

/// The `.rs` files of a folder, recursively, as paths relative to `root`.
pub(crate) fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

/// The module path of a file under `src/`: `daemon/tick.rs` → `daemon::tick`, `store/mod.rs`
/// → `store`, `lib.rs` → `` (the crate root).
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// Code without comments: `//` to the end of the line is dropped (doc comments included), so
/// that a path named in prose is not an import. String literals holding `//` are rare enough
/// in `use` lines that this simple rule holds.
fn code_of(line: &str) -> &str {
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// Every `crate::a::b` path in a text, with `crate::{a, b::c}` groups expanded one level.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // `sqlcron::crate::` cannot occur; a preceding identifier character means another word.
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let segs = segments(item.trim());
                if !segs.is_empty() {
                    out.push(segs);
                }
            }
        } else {
            let segs = segments(rest);
            if !segs.is_empty() {
                out.push(segs);
            }
        }
    }
    out
}

/// The leading `a::b::c` identifiers of a text.
fn segments(text: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    segs
}

/// Where a file's tests begin: the first top-level `#[cfg(test)]`, or the whole file for a
/// file of tests (`tests.rs`, `tests_*.rs`).
fn code_lines(file: &Path, text: &str) -> usize {
    let name = file.file_stem().unwrap().to_string_lossy();
    if name == "tests" || name.starts_with("tests_") {
        return 0;
    }
    text.lines()
        .position(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or_else(|| text.lines().count())
}

/// The sources: (file relative to `src/`, text).
fn sources() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(src.join(&f)).unwrap();
            (f, text)
        })
        .collect()
}

fn imports(sources: &[(PathBuf, String)]) -> Vec<Import> {
    let mut out = Vec::new();
    for (file, text) in sources {
        for (n, line) in text.lines().enumerate() {
            for path in crate_paths(code_of(line)) {
                out.push(Import {
                    file: format!("src/{}", file.display()),
                    line: n + 1,
                    path,
                });
            }
        }
    }
    out
}

/// The layer rule broken by one import, if any.
fn layer_violation(from: &[String], to: &[String]) -> Option<String> {
    let from_path = from;
    let (Some(from), Some(to)) = (from.first(), to.first()) else {
        return None;
    };
    if from == to {
        return None;
    }
    if from == "service" && from_path.get(1).is_some_and(|m| m == "web") && to == "daemon" {
        return Some(
            "the dashboard (`service::web`) reads through `store` and `model`, never the run \
             loop (`daemon`): move what it needs below (docs/architecture.md)"
                .to_string(),
        );
    }
    let allowed = ALLOWED
        .iter()
        .find(|(layer, _)| layer == from)
        .map(|(_, may)| *may);
    match allowed {
        None => Some(format!(
            "`{from}` is not a layer of the table in tests/it/architecture.rs: add it there and to \
             docs/architecture.md"
        )),
        Some(may) if !may.contains(&to.as_str()) => Some(format!(
            "`{from}` may import only {} (docs/architecture.md), not `{to}`",
            if may.is_empty() {
                "nothing of the crate".to_string()
            } else {
                may.iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )),
        Some(_) => None,
    }
}

/// The longest module of `modules` that `path` starts with.
fn resolve<'a>(modules: &'a BTreeSet<Vec<String>>, path: &[String]) -> Option<&'a Vec<String>> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n].to_vec()))
}

/// The cycles of a directed graph: its strongly connected components with more than one node
/// (Tarjan's algorithm, iterative enough for a crate's few hundred modules).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(edges) = s.graph.get(v) {
            for w in edges {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// Every problem of a tree: forbidden imports, cycles between modules and between layers, and
/// rooms too big without a stated reason (`explained`: files docs/architecture.md names).
fn problems(sources: &[(PathBuf, String)], explained: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|(f, _)| module_of(f)).collect();
    let module_of_file: BTreeMap<String, Vec<String>> = sources
        .iter()
        .map(|(f, _)| (format!("src/{}", f.display()), module_of(f)))
        .collect();

    let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut layers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut layer_edge_at: BTreeMap<(String, String), String> = BTreeMap::new();
    for import in imports(sources) {
        let from = &module_of_file[&import.file];
        if let Some(rule) = layer_violation(from, &import.path) {
            problems.push(format!(
                "{}:{}: imports `crate::{}`: {rule}",
                import.file,
                import.line,
                import.path.join("::")
            ));
        }
        if let Some(to) = resolve(&modules, &import.path)
            && to != from
            // A module's own children are its parts, not its neighbours.
            && !to.starts_with(from)
            && !from.starts_with(to)
        {
            files
                .entry(from.join("::"))
                .or_default()
                .insert(to.join("::"));
        }
        if let (Some(a), Some(b)) = (from.first(), import.path.first())
            && a != b
        {
            layers.entry(a.clone()).or_default().insert(b.clone());
            layer_edge_at
                .entry((a.clone(), b.clone()))
                .or_insert_with(|| format!("{}:{}", import.file, import.line));
        }
    }
    for cycle in cycles(&files) {
        problems.push(format!(
            "modules import each other in a circle: {} (break it by moving what they share into \
             the lower one)",
            cycle.join(" → ")
        ));
    }
    for cycle in cycles(&layers) {
        let mut at = Vec::new();
        for a in &cycle {
            for b in &cycle {
                if let Some(place) = layer_edge_at.get(&(a.clone(), b.clone())) {
                    at.push(format!("{a} → {b} at {place}"));
                }
            }
        }
        problems.push(format!(
            "layers import each other in a circle: {} ({})",
            cycle.join(", "),
            at.join("; ")
        ));
    }

    for (file, text) in sources {
        let name = format!("src/{}", file.display());
        let lines = code_lines(file, text);
        if lines > MAX_LINES && !explained.contains(&name) {
            problems.push(format!(
                "{name}: {lines} lines of code (tests apart), over {MAX_LINES}: split it, or say in \
                 docs/architecture.md (\"Rooms kept whole\") why it must be one piece"
            ));
        }
    }
    problems
}

/// The files docs/architecture.md explains under its "Rooms kept whole" heading.
fn explained_rooms() -> BTreeSet<String> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let text = std::fs::read_to_string(&page).expect("docs/architecture.md");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Rooms kept whole"))
        .unwrap_or("");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_layers_hold_no_circle_and_no_oversized_room() {
    let sources = sources();
    assert!(sources.len() > 50, "found only {} files", sources.len());
    let problems = problems(&sources, &explained_rooms());
    assert!(
        problems.is_empty(),
        "the architecture (docs/architecture.md) is broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_layer_folder_is_in_the_table() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let mut table: Vec<String> = ALLOWED.iter().map(|(l, _)| l.to_string()).collect();
    table.sort();
    assert_eq!(
        folders, table,
        "src/ folders and the table of layers differ"
    );
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    for layer in &table {
        assert!(
            page.contains(&format!("`{layer}/`")),
            "docs/architecture.md does not describe `{layer}/`"
        );
    }
    // The crate root holds no rooms of its own: only the map (lib.rs) and the thin binary.
    let mut root_files: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    root_files.sort();
    assert_eq!(root_files, ["lib.rs", "main.rs"]);
}

/// The checker itself: a forbidden import, a circle and a big room are each caught, named by
/// file, line and rule; a tree without them passes.
#[test]
fn the_checker_catches_a_forbidden_import_a_circle_and_a_big_room() {
    let src = |files: &[(&str, &str)]| -> Vec<(PathBuf, String)> {
        files
            .iter()
            .map(|(f, t)| (PathBuf::from(f), t.to_string()))
            .collect()
    };
    let clean = src(&[
        ("model/job.rs", "use crate::schedule::Schedule;\n"),
        ("schedule/mod.rs", "pub fn next() {}\n"),
        ("store/mod.rs", "use crate::model::job::JobSpec;\n"),
        (
            "daemon/mod.rs",
            "use crate::{store::Store, exec::runner};\n",
        ),
        (
            "exec/runner.rs",
            "// crate::store::Store is named in prose only\n",
        ),
    ]);
    assert_eq!(problems(&clean, &BTreeSet::new()), Vec::<String>::new());

    let forbidden = src(&[
        ("model/job.rs", "\n\nuse crate::store::Store;\n"),
        ("store/mod.rs", "fn f() { crate::exec::runner::run(); }\n"),
        ("daemon/decode.rs", "pub fn resolve() {}\n"),
        (
            "service/web/job.rs",
            "use crate::daemon::decode::resolve;\n",
        ),
    ]);
    let found = problems(&forbidden, &BTreeSet::new());
    assert!(
        found.iter().any(
            |p| p.starts_with("src/model/job.rs:3: imports `crate::store::Store`")
                && p.contains("`model` may import only `schedule`")
        ),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("src/store/mod.rs:1:") && p.contains("not `exec`")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("src/service/web/job.rs:1:") && p.contains("never the run")),
        "{found:?}"
    );

    let circle = src(&[
        ("model/a.rs", "use crate::model::b::B;\n"),
        ("model/b.rs", "use crate::model::c::C;\n"),
        ("model/c.rs", "use crate::model::a::A;\n"),
    ]);
    let found = problems(&circle, &BTreeSet::new());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("model::a → model::b → model::c"),
        "{found:?}"
    );

    let big = "fn f() {}\n".repeat(MAX_LINES + 1) + "#[cfg(test)]\nmod tests {}\n";
    let small = "fn f() {}\n".repeat(MAX_LINES) + "#[cfg(test)]\n" + &"\n".repeat(900);
    let rooms = src(&[("daemon/big.rs", &big), ("daemon/small.rs", &small)]);
    let found = problems(&rooms, &BTreeSet::new());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("src/daemon/big.rs: 601 lines"),
        "{found:?}"
    );
    let explained: BTreeSet<String> = ["src/daemon/big.rs".to_string()].into();
    assert!(problems(&rooms, &explained).is_empty());
}
