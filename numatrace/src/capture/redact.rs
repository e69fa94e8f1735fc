//! `record --redact`: names that could identify the reporter's machine or workload (comm,
//! cgroup paths, mapping paths, command lines, the host name) become keyed hashes. The key is
//! random per capture and never written, so a hash cannot be reversed by trying names, yet the
//! same name is the same hash throughout one capture (tasks stay tellable apart and joinable).

use std::hash::{BuildHasher as _, Hasher as _, RandomState};

use crate::{engine::Snapshot, model::Window};

pub struct Redactor {
    key: RandomState,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Redactor {
    pub fn new() -> Self {
        Self {
            key: RandomState::new(),
        }
    }

    /// A name as `~` and 8 hex digits.
    pub fn name(&self, s: &str) -> String {
        let mut h = self.key.build_hasher();
        h.write(s.as_bytes());
        format!("~{:08x}", h.finish() as u32)
    }

    /// A path component by component, so that the hierarchy stays readable.
    pub fn path(&self, p: &str) -> String {
        p.split('/')
            .map(|c| {
                if c.is_empty() {
                    String::new()
                } else {
                    self.name(c)
                }
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The kernel's own names (`[heap]`, `[stack]`, ...) say nothing about the reporter: kept.
    /// Anything else, `[anon:NAME]` (a name the program chose) included, is hashed.
    fn mapping(&self, m: &str) -> String {
        const KERNEL: [&str; 5] = ["[heap]", "[stack]", "[vdso]", "[vvar]", "[vsyscall]"];
        if KERNEL.contains(&m) {
            m.to_owned()
        } else if let Some(name) = m.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            match name.split_once(':') {
                Some((kind, n)) => format!("[{kind}:{}]", self.name(n)),
                None => format!("[{}]", self.name(name)),
            }
        } else {
            self.path(m)
        }
    }

    pub fn snapshot(&self, s: &mut Snapshot) {
        for t in &mut s.tasks {
            t.comm = self.name(&t.comm).into();
            t.cgroup = t.cgroup.as_deref().map(|c| self.path(c).into());
        }
        for list in s.vmas.values_mut() {
            for v in list {
                v.mapping = v.mapping.as_deref().map(|m| self.mapping(m));
            }
        }
    }

    pub fn window(&self, w: &mut Window) {
        if let Some(cmd) = &mut w.command {
            for a in cmd.iter_mut() {
                *a = self.path(a);
            }
        }
        // Hashed as task comms are: the kernel keeps 15 bytes of a name, so the filter must
        // be cut the same way before hashing, or it would never match.
        w.comm_filter = w
            .comm_filter
            .as_deref()
            .map(|c| self.name(&c.chars().take(15).collect::<String>()));
        w.cgroup_filter = w.cgroup_filter.as_deref().map(|c| self.path(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_within_a_capture_and_keyed() {
        let r = Redactor::new();
        assert_eq!(r.name("postgres"), r.name("postgres"));
        assert_ne!(r.name("postgres"), r.name("redis"));
        assert_ne!(Redactor::new().name("postgres"), r.name("postgres"));
        let p = r.path("/system.slice/db.service");
        assert!(p.starts_with("/~") && p.matches('/').count() == 2, "{p}");
        // Each component is a token (`~` and 8 hex digits, which may well spell "db").
        assert!(!p.contains("system") && !p.contains(".service"), "{p}");
        assert!(p.split('/').skip(1).all(|c| c.len() == 9), "{p}");
        assert_eq!(r.mapping("[heap]"), "[heap]");
        let anon = r.mapping("[anon:secret cache]");
        assert!(
            anon.starts_with("[anon:~") && !anon.contains("secret"),
            "{anon}"
        );
    }
}
