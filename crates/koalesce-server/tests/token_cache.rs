//! Attack tests of the server's memory of valid tokens (`store::token_cache`): a token revoked
//! by another process, or through the server, is refused at the very next check; nothing read
//! while a revocation is under way is remembered after it; expiry holds for remembered tokens.
//! Each test first shows that a token *is* remembered (a row deleted behind the store's back,
//! with no revocation note, is still let in), so the checks that follow would fail with a
//! stale memory.

use std::io::Write;
use std::path::Path;

use koalesce_server::store::{self, Store, TokenCheck};

struct Bed {
    dir: tempfile::TempDir,
    store: Store,
}

impl Bed {
    fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        // The database exists before the server's store opens it, as with `token create`.
        store::create_token(dir.path(), "nobody", false).unwrap();
        let store = Store::open(&dir.path().join(koalesce_server::DB_FILE)).unwrap();
        Bed { dir, store }
    }

    fn token(&self, user: &str) -> String {
        store::create_token(self.dir.path(), user, false).unwrap()
    }

    fn check(&self, token: &str) -> TokenCheck {
        self.store.check_token(token, koalesce_server::now_ms()).unwrap()
    }

    fn id_of(&self, user: &str) -> String {
        let c = store::open_tokens(self.dir.path()).unwrap();
        store::list_tokens(&c, Some(user)).unwrap().remove(0).id
    }

    /// Deletes a user's tokens from another connection, leaving no note (not a revocation).
    fn delete_behind_its_back(&self, user: &str) {
        let c = store::open_tokens(self.dir.path()).unwrap();
        c.execute("DELETE FROM tokens WHERE user = ?1", [user]).unwrap();
    }

    fn notes(&self) -> std::path::PathBuf {
        self.dir.path().join(store::REVOCATIONS_FILE)
    }
}

fn valid(user: &str) -> TokenCheck {
    TokenCheck::Valid {
        user: user.into(),
        admin: false,
    }
}

fn append(path: &Path, line: &str) -> std::fs::File {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    f
}

#[test]
fn a_token_revoked_by_another_process_is_refused_at_the_next_check() {
    let bed = Bed::new();
    let alice = bed.token("alice");
    let bob = bed.token("bob");
    assert_eq!(bed.check(&alice), valid("alice"));
    assert_eq!(bed.check(&bob), valid("bob"));
    // Remembered: without a revocation note, a deleted row goes unnoticed.
    bed.delete_behind_its_back("bob");
    assert_eq!(bed.check(&bob), valid("bob"));
    // `koalesce token revoke --data-dir` (another process, another connection).
    let revoked = store::revoke_token_at(bed.dir.path(), &bed.id_of("alice")).unwrap();
    assert_eq!(revoked.map(|t| t.user).as_deref(), Some("alice"));
    assert_eq!(bed.check(&alice), TokenCheck::Unknown);
    // Everything was forgotten, not only the revoked token.
    assert_eq!(bed.check(&bob), TokenCheck::Unknown);
    // A second revocation is seen as well (the notes file grew).
    let carol = bed.token("carol");
    assert_eq!(bed.check(&carol), valid("carol"));
    assert_eq!(bed.check(&carol), valid("carol"));
    store::revoke_token_at(bed.dir.path(), &bed.id_of("carol")).unwrap();
    assert_eq!(bed.check(&carol), TokenCheck::Unknown);
}

#[test]
fn nothing_read_while_a_revocation_is_under_way_is_remembered() {
    let bed = Bed::new();
    let alice = bed.token("alice");
    assert_eq!(bed.check(&alice), valid("alice"));
    // A revoker holds the notes' lock and has written its note, not committed yet.
    let f = append(&bed.notes(), "revoking (test)\n");
    let held = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).unwrap();
    // Still valid in the database: let in, but not remembered.
    assert_eq!(bed.check(&alice), valid("alice"));
    assert_eq!(bed.check(&alice), valid("alice"));
    // Its commit; the lock is still held.
    bed.delete_behind_its_back("alice");
    assert_eq!(bed.check(&alice), TokenCheck::Unknown);
    drop(held);
    assert_eq!(bed.check(&alice), TokenCheck::Unknown);
    // Once the lock is free, tokens are remembered again.
    let bob = bed.token("bob");
    assert_eq!(bed.check(&bob), valid("bob"));
    bed.delete_behind_its_back("bob");
    assert_eq!(bed.check(&bob), valid("bob"));
}

#[test]
fn a_revoker_that_died_after_its_note_leaves_no_stale_answer() {
    let bed = Bed::new();
    let alice = bed.token("alice");
    assert_eq!(bed.check(&alice), valid("alice"));
    // Its note and its commit, then it died (its lock went with it).
    drop(append(&bed.notes(), "revoking (died)\n"));
    bed.delete_behind_its_back("alice");
    assert_eq!(bed.check(&alice), TokenCheck::Unknown);
}

#[test]
fn a_token_revoked_through_the_server_is_refused_at_the_next_check() {
    let bed = Bed::new();
    let alice = bed.token("alice");
    let bob = bed.token("bob");
    assert_eq!(bed.check(&alice), valid("alice"));
    assert_eq!(bed.check(&bob), valid("bob"));
    bed.delete_behind_its_back("bob");
    assert_eq!(bed.check(&bob), valid("bob"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(bed.store.revoke_token(bed.id_of("alice"))).unwrap();
    assert_eq!(bed.check(&alice), TokenCheck::Unknown);
    assert_eq!(bed.check(&bob), TokenCheck::Unknown);
}

#[test]
fn a_remembered_token_still_expires() {
    let bed = Bed::new();
    let short = store::create_token_expiring(bed.dir.path(), "carol", false, Some(300)).unwrap();
    assert_eq!(bed.check(&short), valid("carol"));
    assert_eq!(bed.check(&short), valid("carol"));
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(bed.check(&short), TokenCheck::Expired);
    // Unknown tokens are never remembered as valid.
    assert_eq!(bed.check("koa_0000"), TokenCheck::Unknown);
}
