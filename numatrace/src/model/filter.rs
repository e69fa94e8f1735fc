//! What a view keeps: tasks by comm and cgroup subtree.

use super::TaskRecord;

/// What a view keeps: tasks by comm and cgroup subtree. Views never delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// comm as the kernel keeps it (15 bytes).
    pub comm: Option<String>,
    /// A cgroup path under the cgroup2 mount: that cgroup and its descendants.
    pub cgroup: Option<String>,
}

impl Filter {
    pub fn matches(&self, t: &TaskRecord) -> bool {
        self.comm.as_ref().is_none_or(|c| t.comm == comm_prefix(c))
            && self
                .cgroup
                .as_ref()
                .is_none_or(|root| t.cgroup.as_deref().is_some_and(|p| within(p, root)))
    }
}

/// The first 15 characters of `comm`, as the kernel keeps a task's name: compared without
/// building a string per task.
fn comm_prefix(comm: &str) -> &str {
    comm.char_indices()
        .nth(15)
        .map_or(comm, |(end, _)| &comm[..end])
}

/// Whether cgroup `path` is `root` or below it.
pub fn within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}
