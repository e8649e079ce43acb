//! A `command` that needs no shell: a program and plain words, started directly instead of
//! through `/bin/sh -c` (the way GNU make runs such recipe lines). The shell would only have
//! split the text on blanks and looked the program up in `PATH`, which starting it directly
//! does the same; it would have cost a second process and a second `exec` per run, a fifth of
//! the machine in a burst of short jobs (docs/benchmarks.md, "The midnight burst").
//!
//! Anything the shell would read differently keeps the shell: quotes, escapes, variables and
//! substitutions, globs, `~`, comments, redirections, pipes, lists, subshells and braces, a
//! first word that assigns a variable, and a first word that is a shell keyword or builtin
//! (`exit 3`, `cd /tmp`, `export X`, `. file`; also `echo`, `true`, `printf` and the like, whose
//! programs answer some arguments differently from the builtins). When the program
//! cannot be started directly (not found, not executable, not a binary or a script with `#!`),
//! the runner starts the text through the shell after all, so its message and exit status
//! (127, 126) are the shell's, as before.

/// Bytes a plain word may hold: letters, digits and these. Everything else (blanks aside)
/// means the shell.
const PLAIN: &[u8] = b"_-./:,+=@%^";

/// Words the shell reads as syntax or runs itself: reserved words, POSIX special builtins and
/// what bash or dash add, and the builtins that also exist as programs but answer differently
/// (`echo -e x`, `true --help`, `printf --version`, `kill -l`, `test --help`).
const SHELL_WORDS: &[&str] = &[
    ".", ":", "alias", "bg", "break", "builtin", "case", "cd", "command", "continue", "declare",
    "do", "done", "echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "false", "fc",
    "fg", "fi", "for", "function", "getopts", "hash", "if", "in", "jobs", "kill", "let", "local",
    "printf", "pwd", "read", "readonly", "return", "select", "set", "shift", "source", "test",
    "then", "time", "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias",
    "unset", "until", "wait", "while",
];

/// The program and its arguments when `text` needs no shell, else `None`.
pub fn plain_words(text: &str) -> Option<Vec<String>> {
    let blank = |b: u8| b == b' ' || b == b'\t';
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || PLAIN.contains(&b) || blank(b))
    {
        return None;
    }
    let words: Vec<String> = text
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let first = words.first()?;
    if first.contains('=') || SHELL_WORDS.contains(&first.as_str()) {
        return None;
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Option<Vec<String>> {
        plain_words(text)
    }

    fn some(w: &[&str]) -> Option<Vec<String>> {
        Some(w.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn programs_with_plain_arguments_need_no_shell() {
        assert_eq!(
            words("/usr/local/bin/backup.sh"),
            some(&["/usr/local/bin/backup.sh"])
        );
        assert_eq!(
            words("  pg_dump\t-Fc  --file=/var/backups/db.dump mydb "),
            some(&["pg_dump", "-Fc", "--file=/var/backups/db.dump", "mydb"])
        );
        assert_eq!(
            words("curl -fsS https://example.com/ping"),
            some(&["curl", "-fsS", "https://example.com/ping"])
        );
    }

    #[test]
    fn anything_the_shell_reads_keeps_the_shell() {
        for text in [
            "",
            "   ",
            "echo $HOME",
            "echo ${SQLCRON_SLOT}",
            "echo `date`",
            "echo $(date)",
            "echo 'a b'",
            "echo \"a b\"",
            "echo a\\ b",
            "ls *.log",
            "ls file?",
            "ls [ab]",
            "ls ~/x",
            "ls ~",
            "true # comment",
            "date > /tmp/x",
            "cat < /tmp/x",
            "a | b",
            "a && b",
            "a || b",
            "a; b",
            "a &",
            "(a)",
            "{ a; }",
            "! false",
            "a\nb",
            "X=1 env",
            "exit 3",
            "cd /tmp",
            "export X",
            ". /etc/profile",
            "source /etc/profile",
            "set -e",
            "exec /bin/true",
            "if",
            "while",
            "umask 077",
            "ulimit -n 10",
            "wait",
            "trap x EXIT",
            "époque",
        ] {
            assert_eq!(plain_words(text), None, "{text:?}");
        }
    }

    #[test]
    fn builtins_that_are_also_programs_keep_the_shell() {
        // `/bin/echo -e x` prints `x`, dash's echo prints `-e x`; `/bin/true --help` prints help.
        for text in [
            "echo hello",
            "echo -e x",
            "true",
            "true --help",
            "false",
            "printf %s x",
            "kill -l",
            "test -e /tmp",
            "pwd",
        ] {
            assert_eq!(plain_words(text), None, "{text:?}");
        }
    }
}
