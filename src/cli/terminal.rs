//! Text from the database on an operator's terminal. A row's text is anybody's who can write
//! the table (a job's output in a run's message, a forged claim in the audit trail, a row
//! inserted with SQL): a control character in it (an escape sequence that hides the lines after
//! it, a carriage return that overwrites a column) is shown as its escape, never sent as is.
//! `--json` output is escaped by JSON itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character (C0, DEL and C1) written as `\u{..}`.
pub(super) fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` as [`shown`] writes it, but for newlines and tabs, which are kept: a job's output on
/// a terminal.
pub(super) fn shown_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split('\t')
                .map(|part| shown(part).into_owned())
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert_eq!(shown("paused"), "paused");
        assert_eq!(shown("a\u{1b}[8mb"), "a\\u{1b}[8mb");
        assert_eq!(shown("x\ry\tz\u{9b}"), "x\\u{d}y\\u{9}z\\u{9b}");
        assert_eq!(shown("é ✓"), "é ✓");
        assert_eq!(
            shown_lines("a\tb\nc\u{1b}[2J\r\n"),
            "a\tb\nc\\u{1b}[2J\\u{d}\n"
        );
    }
}
