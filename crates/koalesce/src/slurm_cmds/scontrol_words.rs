//! scontrol's keywords and `show` entities as Slurm 22.05's scontrol.c matches them: each with
//! `xstrncasecmp(tag, NAME, MAX(tag_len, MIN)) == 0`, in order, the first match winning. So a
//! keyword may be abbreviated down to its minimum length, in any case (`vers` is `version`;
//! `ver` is nothing, being shorter than the 4 letters `verbose` and `version` each need), and
//! the order settles an abbreviation two names share (`show j` is `jobs`, not `jobid`).

/// How many characters Slurm compares.
#[derive(Clone, Copy)]
enum Len {
    /// `MAX(tag_len, n)`: the whole tag, and at least `n` characters.
    AtLeast(usize),
    /// Exactly `n` (`hold`, `requeuehold`, `\q`): a longer tag matches on its first `n`.
    Exactly(usize),
}

use Len::{AtLeast, Exactly};

/// `_process_command`'s keywords, in its order (scontrol.c of slurm-22-05-8-1).
const KEYWORDS: &[(&str, Len)] = &[
    ("abort", AtLeast(5)),
    ("all", AtLeast(2)),
    ("cancel_reboot", AtLeast(3)),
    ("completing", AtLeast(2)),
    ("cluster", AtLeast(2)),
    ("create", AtLeast(2)),
    ("details", AtLeast(1)),
    ("errnumstr", AtLeast(2)),
    ("errnostr", AtLeast(2)),
    ("exit", AtLeast(2)),
    ("gethost", AtLeast(7)),
    ("hash_file", AtLeast(15)),
    ("hash", AtLeast(9)),
    ("help", AtLeast(2)),
    ("hide", AtLeast(2)),
    ("oneliner", AtLeast(1)),
    ("pidinfo", AtLeast(3)),
    ("ping", AtLeast(3)),
    ("\\q", Exactly(2)),
    ("quiet", AtLeast(4)),
    ("quit", AtLeast(4)),
    ("reboot_nodes", AtLeast(3)),
    ("reconfigure", AtLeast(3)),
    ("requeue", AtLeast(3)),
    ("requeuehold", Exactly(11)),
    ("hold", Exactly(4)),
    ("holdu", Exactly(5)),
    ("uhold", Exactly(5)),
    ("release", AtLeast(3)),
    ("suspend", AtLeast(2)),
    ("resume", AtLeast(3)),
    ("top", AtLeast(3)),
    ("token", AtLeast(3)),
    ("wait_job", AtLeast(2)),
    ("setdebugflags", AtLeast(9)),
    ("fsdampeningfactor", AtLeast(3)),
    ("fairsharedampeningfactor", AtLeast(3)),
    ("setdebug", AtLeast(2)),
    ("schedloglevel", AtLeast(3)),
    ("show", AtLeast(3)),
    ("write", AtLeast(5)),
    ("takeover", AtLeast(8)),
    ("shutdown", AtLeast(8)),
    ("update", AtLeast(1)),
    ("delete", AtLeast(1)),
    ("verbose", AtLeast(4)),
    ("version", AtLeast(4)),
    ("listpids", AtLeast(1)),
    ("getent", AtLeast(6)),
    ("notify", AtLeast(1)),
    ("callerid", AtLeast(3)),
];

/// `_show_it`'s entities, in its order.
const SHOW_ENTITIES: &[(&str, Len)] = &[
    ("aliases", AtLeast(1)),
    ("bbstat", AtLeast(2)),
    ("dwstat", AtLeast(2)),
    ("burstbuffer", AtLeast(2)),
    ("assoc_mgr", AtLeast(2)),
    ("cache", AtLeast(2)),
    ("config", AtLeast(1)),
    ("daemons", AtLeast(1)),
    ("federations", AtLeast(1)),
    ("frontendname", AtLeast(1)),
    ("hostnames", AtLeast(5)),
    ("hostlist", AtLeast(5)),
    ("hostlistsorted", AtLeast(9)),
    ("jobs", AtLeast(1)),
    ("jobid", AtLeast(1)),
    ("licenses", AtLeast(2)),
    ("nodes", AtLeast(1)),
    ("partitions", AtLeast(2)),
    ("partitionname", AtLeast(2)),
    ("reservations", AtLeast(1)),
    ("reservationname", AtLeast(1)),
    ("slurmd", AtLeast(2)),
    ("steps", AtLeast(2)),
    ("topology", AtLeast(1)),
];

/// C's `strncasecmp(a, b, n) == 0` on strings that end where C's end (at a NUL or their end).
fn strncasecmp_eq(a: &str, b: &str, n: usize) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    for i in 0..n {
        let ca = a.get(i).copied().unwrap_or(0);
        let cb = b.get(i).copied().unwrap_or(0);
        if !ca.eq_ignore_ascii_case(&cb) {
            return false;
        }
        if ca == 0 {
            return true;
        }
    }
    true
}

fn lookup(table: &[(&'static str, Len)], tag: &str) -> Option<&'static str> {
    table.iter().find_map(|&(name, len)| {
        let n = match len {
            AtLeast(min) => tag.len().max(min),
            Exactly(n) => n,
        };
        strncasecmp_eq(tag, name, n).then_some(name)
    })
}

/// The scontrol keyword `tag` stands for (`vers` → `version`), or None (Slurm's `invalid
/// keyword`).
pub(crate) fn keyword(tag: &str) -> Option<&'static str> {
    lookup(KEYWORDS, tag)
}

/// The `show` entity `tag` stands for (`conf` → `config`, `j` → `jobs`), or None (Slurm's
/// `invalid entity`).
pub(crate) fn show_entity(tag: &str) -> Option<&'static str> {
    lookup(SHOW_ENTITIES, tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_abbreviate_as_in_slurm() {
        for (tag, want) in [
            ("version", Some("version")),
            ("vers", Some("version")),
            ("VERSI", Some("version")),
            // Shorter than 4: neither verbose nor version (Slurm: "invalid keyword: ver").
            ("ver", None),
            ("verb", Some("verbose")),
            ("versions", None),
            ("show", Some("show")),
            ("sho", Some("show")),
            ("sh", None),
            ("ping", Some("ping")),
            ("pin", Some("ping")),
            ("pi", None),
            ("pid", Some("pidinfo")),
            ("hash", Some("hash")),
            ("hash_file", Some("hash_file")),
            ("holdme", Some("hold")),
            ("u", Some("update")),
            ("", None),
            ("frobnicate", None),
        ] {
            assert_eq!(keyword(tag), want, "{tag:?}");
        }
    }

    #[test]
    fn show_entities_abbreviate_as_in_slurm() {
        for (tag, want) in [
            ("c", Some("config")),
            ("co", Some("config")),
            ("conf", Some("config")),
            ("CONFIG", Some("config")),
            ("configuration", None),
            ("cfg", None),
            ("ca", Some("cache")),
            ("j", Some("jobs")),
            ("job", Some("jobs")),
            ("jobid", Some("jobid")),
            ("jobi", Some("jobid")),
            ("host", None),
            ("hostn", Some("hostnames")),
            ("hostname", Some("hostnames")),
            ("hostl", Some("hostlist")),
            ("a", Some("aliases")),
            ("n", Some("nodes")),
            ("", None),
        ] {
            assert_eq!(show_entity(tag), want, "{tag:?}");
        }
    }
}
