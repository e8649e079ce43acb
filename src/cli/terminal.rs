//! Text from the database on an operator's terminal. A row's text is anybody's who can write
//! the table (a job's output in a run's message, a forged claim in the audit trail, a row
//! inserted with SQL): a control character in it (an escape sequence that hides the lines after
//! it, a carriage return that overwrites a column) is shown as its escape, never sent as is.
//! `--json` output is escaped by JSON itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` changes how the text around it is shown rather than showing itself: a control
/// character (C0, DEL and C1), a line or paragraph separator, a format character (a
/// bidirectional mark, embedding, override or isolate, which reorders what follows: a command
/// read right to left), or any other character Unicode says to show as nothing (its
/// Default_Ignorable_Code_Point list: zero-width spaces and joiners, fillers, variation
/// selectors, tags).
pub(super) fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061c}'
                | '\u{06dd}'
                | '\u{070f}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08e2}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// `text` with every character that is [`hidden`] written as `\u{..}`.
pub(super) fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
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
            shown("rm -rf /tmp/x \u{202e}gol.\u{2066}"),
            "rm -rf /tmp/x \\u{202e}gol.\\u{2066}"
        );
        assert_eq!(shown("a\u{200b}b\u{2028}"), "a\\u{200b}b\\u{2028}");
        assert_eq!(
            shown("so\u{ad}ft \u{3164}\u{e0041}\u{fe0f}"),
            "so\\u{ad}ft \\u{3164}\\u{e0041}\\u{fe0f}"
        );
        assert_eq!(
            shown_lines("a\tb\nc\u{1b}[2J\r\n"),
            "a\tb\nc\\u{1b}[2J\\u{d}\n"
        );
    }
}
