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

/// A table as `systemctl list-timers` prints one: every column but the last as wide as its
/// widest cell (or its heading), two spaces apart, so that no value runs into the next column.
/// Widths count characters. Every cell is [`shown`]: a row's text (a name, a schedule, an
/// error) cannot move the cursor, overwrite a line or start one.
pub(super) fn table(headings: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| shown(c).into_owned()).collect())
        .collect();
    let rows = rows.as_slice();
    let columns = headings.len();
    let mut widths: Vec<usize> = headings.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns.saturating_sub(1)) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < columns {
                text.push_str(cell);
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                text.extend(std::iter::repeat_n(' ', pad));
            } else {
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headings.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tables_columns_are_as_wide_as_their_widest_cell() {
        let rows = vec![
            vec![
                "a".to_string(),
                "2026-11-25T11:28:40.632Z".to_string(),
                "exit 0".to_string(),
            ],
            vec!["long-name".to_string(), "-".to_string(), "x".to_string()],
        ];
        let text = table(&["JOB", "SLOT", "DETAIL"], &rows);
        let lines: Vec<&str> = text.lines().collect();
        // The last column starts at the same place on every line, after the widest slot.
        let at = lines[0].find("DETAIL").unwrap();
        assert_eq!(lines[1].find("exit 0"), Some(at), "{text}");
        assert_eq!(lines[2].rfind('x'), Some(at), "{text}");
        assert_eq!(
            at,
            "long-name".len() + 2 + "2026-11-25T11:28:40.632Z".len() + 2
        );
    }

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
