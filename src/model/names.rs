//! The names of jobs and nodes: one character set everywhere (TOML, rows written with SQL, the
//! command line), so that a name is safe in a metrics label, a log line, a file name and a
//! shell variable's value without escaping, and reads the same on every node.

/// Characters a job or node name may hold besides ASCII letters and digits.
pub const NAME_PUNCTUATION: &str = "._-@#:+";

/// Whether `name` is a valid job or node name of at most `max` characters: ASCII letters,
/// digits and `. _ - @ # : +`, not starting with `-`. The message names what is wrong.
pub fn check_name(name: &str, max: usize) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > max {
        return Err(format!("\"{}\" must be 1-{max} characters", shown(name)));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !NAME_PUNCTUATION.contains(*c))
    {
        return Err(format!(
            "\"{}\" holds {c:?}: a name is ASCII letters, digits and {NAME_PUNCTUATION}",
            shown(name)
        ));
    }
    if name.starts_with('-') {
        return Err(format!("\"{}\" must not start with '-'", shown(name)));
    }
    Ok(())
}

/// The name as a message may quote it: control characters escaped, at most 60 characters.
fn shown(name: &str) -> String {
    name.chars().take(60).flat_map(char::escape_debug).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_a_documented_character_set() {
        for ok in [
            "backup",
            "db.vacuum-2",
            "tmpl@web-1",
            "x#backfill-1700000000000",
            "a:b+c_d",
        ] {
            assert_eq!(check_name(ok, 200), Ok(()), "{ok}");
        }
        let e = check_name("backup\"} 1\nlast_success_timestamp{job=\"x", 200).unwrap_err();
        assert!(e.contains("holds '\"'") && !e.contains('\n'), "{e}");
        assert!(
            check_name("two words", 200)
                .unwrap_err()
                .contains("holds ' '")
        );
        assert!(check_name("été", 200).is_err());
        assert!(
            check_name("-rf", 200)
                .unwrap_err()
                .contains("start with '-'")
        );
        assert!(check_name("", 200).is_err());
        assert!(check_name(&"a".repeat(201), 200).is_err());
    }
}
