//! Shell wildcard matching for string comparisons (GridWay compares strings with fnmatch(3)):
//! `*` any run, `?` one character, `[abc]`, `[a-z]`, `[!x]` / `[^x]` a class, `\x` a literal.
//! ASCII letters match without regard to case (host and architecture names are
//! case-insensitive in practice). No allocation; worst case O(pattern × text).

/// Whether `text` matches the wildcard `pattern`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Backtracking point: the pattern position after the last `*` and the text position it
    // was tried at.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, text[t]) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    } else if text[t] == b'[' {
                        // An unterminated '[' is a literal.
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1].eq_ignore_ascii_case(&text[t]) {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                c => {
                    if c.eq_ignore_ascii_case(&text[t]) {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[start] == b'['`. Returns whether it
/// matched and the index after the class, or None when the class is not terminated.
fn class(pattern: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let c = c.to_ascii_lowercase();
    let mut matched = false;
    let mut first = true;
    loop {
        let &b = pattern.get(i)?;
        if b == b']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        let lo = b.to_ascii_lowercase();
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&e| e != b']') {
            let hi = pattern[i + 2].to_ascii_lowercase();
            if lo <= c && c <= hi {
                matched = true;
            }
            i += 3;
        } else {
            if lo == c {
                matched = true;
            }
            i += 1;
        }
    }
}

/// Whether a pattern uses any wildcard (otherwise a plain case-insensitive comparison does).
pub fn has_wildcards(pattern: &[u8]) -> bool {
    pattern.iter().any(|c| matches!(c, b'*' | b'?' | b'[' | b'\\'))
}

#[cfg(test)]
mod tests {
    use super::glob_match as g;

    #[test]
    fn wildcards() {
        assert!(g(b"*", b""));
        assert!(g(b"*.es", b"hydrus.dacya.ucm.es"));
        assert!(!g(b"*.es", b"hydrus.dacya.ucm.nl"));
        assert!(g(b"*pbs*", b"jobmanager-pbs"));
        assert!(g(b"i?86", b"i686"));
        assert!(!g(b"i?86", b"i86"));
        assert!(g(b"x86_64", b"X86_64"));
        assert!(g(b"[a-c]*", b"beta"));
        assert!(!g(b"[!a-c]*", b"beta"));
        assert!(g(b"a\\*", b"a*"));
        assert!(!g(b"a\\*", b"ab"));
        assert!(g(b"[", b"["));
        assert!(g(b"a*b*c", b"aXXbYYc"));
        assert!(!g(b"a*b*c", b"aXXbYY"));
        assert!(g(b"", b""));
        assert!(!g(b"", b"x"));
    }
}
