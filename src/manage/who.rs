//! Who is changing GPU settings, as the audit records it: the real user (name and uid), and
//! the user behind `sudo` when root was reached that way.
//!
//! Invariant: never fails — a uid without a passwd entry is recorded as `uid N`. `SUDO_USER`
//! is believed only when the real uid is 0 (sudo sets it for root's process; anyone else
//! could forge it for their own).

/// The person behind a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// `alice`, `root`, `root, sudo by alice`, `uid 1234`.
    pub name: String,
    /// The real uid of the process.
    pub uid: u32,
}

impl Actor {
    /// The user running this process.
    pub fn current() -> Actor {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let sudo = std::env::var("SUDO_USER").ok().filter(|s| !s.is_empty());
        Actor::describe(uid, user_name(uid), sudo)
    }

    fn describe(uid: u32, name: Option<String>, sudo_user: Option<String>) -> Actor {
        let name = name.unwrap_or_else(|| format!("uid {uid}"));
        let name = match sudo_user {
            Some(by) if uid == 0 => format!("{name}, sudo by {by}"),
            _ => name,
        };
        Actor { name, uid }
    }
}

/// The passwd name of `uid`.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid value to be overwritten by getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pwd`'s strings.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwuid_r.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudo_is_named_only_for_root() {
        let root = Actor::describe(0, Some("root".into()), Some("alice".into()));
        assert_eq!(root.name, "root, sudo by alice");
        let forged = Actor::describe(1000, Some("bob".into()), Some("alice".into()));
        assert_eq!(forged.name, "bob");
        assert_eq!(Actor::describe(4242, None, None).name, "uid 4242");
        // SAFETY: as in `current`.
        let me = Actor::current();
        assert_eq!(me.uid, unsafe { libc::getuid() });
        assert!(!me.name.is_empty());
    }
}
