//! A small reader of the kernel's BTF (/sys/kernel/btf/vmlinux): struct member offsets and
//! function parameter counts, so that the programs read fields at this kernel's offsets and
//! nothing is baked in at build time. (aya-obj parses BTF too, but keeps member access private.)

use std::fs;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BtfError {
    #[error("reading BTF: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
}

const KIND_PTR: u32 = 2;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_TYPE_TAG: u32 = 18;

/// One type record, decoded from the raw section on demand (never stored: the kernel's BTF
/// has ~150 000 types, and decoding all of them up front took 35 MB for a 5.5 MB file).
#[derive(Clone, Copy, Debug)]
struct Type {
    name: u32,
    kind: u32,
    kind_flag: bool,
    vlen: usize,
    /// size, or referenced type for modifiers/typedefs/functions.
    size_or_type: u32,
    /// Where the kind's extra data (members, parameters, values) starts in the type section.
    body: usize,
}

/// One parameter of a kernel function, from BTF.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BtfParam {
    pub name: String,
    /// C type, e.g. `struct folio *`.
    pub ty: String,
}

/// Parsed BTF: the raw file, where each type record starts (ids 1..), and the named types of
/// the kinds looked up by name, sorted by a hash of the name.
pub struct Btf {
    raw: Vec<u8>,
    types_start: usize,
    types_len: usize,
    strings_start: usize,
    strings_len: usize,
    /// Byte offset of type `id` in the type section (index 0: void).
    offsets: Vec<u32>,
    by_name: Vec<(u64, u32)>,
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, BtfError> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(BtfError::Malformed("truncated"))
}

fn name_hash(name: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

impl Btf {
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::parse_owned(fs::read("/sys/kernel/btf/vmlinux")?)
    }

    pub fn parse(b: &[u8]) -> Result<Self, BtfError> {
        Self::parse_owned(b.to_vec())
    }

    fn parse_owned(raw: Vec<u8>) -> Result<Self, BtfError> {
        let b = &raw;
        if b.len() < 24 || b[0..2] != [0x9f, 0xeb] {
            return Err(BtfError::Malformed(
                "bad magic (only little-endian BTF is read)",
            ));
        }
        let hdr_len = u32_at(b, 4)? as usize;
        let type_off = u32_at(b, 8)? as usize;
        let type_len = u32_at(b, 12)? as usize;
        let str_off = u32_at(b, 16)? as usize;
        let str_len = u32_at(b, 20)? as usize;
        let tstart = hdr_len + type_off;
        let types_b = b
            .get(tstart..tstart + type_len)
            .ok_or(BtfError::Malformed("type section"))?;
        let sstart = hdr_len + str_off;
        b.get(sstart..sstart + str_len)
            .ok_or(BtfError::Malformed("string section"))?;

        // Type id 0 is void; keep a placeholder so ids index directly.
        let mut offsets = vec![u32::MAX];
        let mut p = 0usize;
        while p + 12 <= types_b.len() {
            let info = u32_at(types_b, p + 4)?;
            offsets.push(p as u32);
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            p += 12
                + match kind {
                    1 | 14 | 17 => 4, // INT, VAR, DECL_TAG
                    3 => 12,          // ARRAY
                    KIND_STRUCT | KIND_UNION => vlen * 12,
                    KIND_ENUM | KIND_FUNC_PROTO => vlen * 8,
                    15 | 19 => vlen * 12, // DATASEC, ENUM64
                    // PTR, FWD, typedef and modifiers, FUNC, FLOAT, TYPE_TAG
                    2 | 7..=12 | 16 | 18 => 0,
                    // A newer kind of unknown size: every later record would be misread.
                    _ => return Err(BtfError::Malformed("unknown BTF kind")),
                };
            if p > types_b.len() {
                return Err(BtfError::Malformed("truncated"));
            }
        }
        let mut btf = Self {
            raw,
            types_start: tstart,
            types_len: type_len,
            strings_start: sstart,
            strings_len: str_len,
            offsets,
            by_name: Vec::new(),
        };
        let mut by_name = Vec::new();
        for id in 1..btf.offsets.len() as u32 {
            let Some(t) = btf.ty(id) else { continue };
            if t.name != 0
                && matches!(
                    t.kind,
                    KIND_STRUCT | KIND_UNION | KIND_FUNC | KIND_ENUM | KIND_TYPEDEF
                )
            {
                by_name.push((name_hash(btf.str_bytes(t.name)), id));
            }
        }
        by_name.sort_unstable();
        btf.by_name = by_name;
        Ok(btf)
    }

    fn types_b(&self) -> &[u8] {
        &self.raw[self.types_start..self.types_start + self.types_len]
    }

    fn str_bytes(&self, off: u32) -> &[u8] {
        let strings = &self.raw[self.strings_start..self.strings_start + self.strings_len];
        let s = strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        &s[..end]
    }

    fn str_at(&self, off: u32) -> &str {
        std::str::from_utf8(self.str_bytes(off)).unwrap_or("")
    }

    /// Ids of the named types (struct, union, func, enum, typedef) called `name`.
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = u32> + 'a {
        let h = name_hash(name.as_bytes());
        let from = self.by_name.partition_point(|&(x, _)| x < h);
        self.by_name[from..]
            .iter()
            .take_while(move |&&(x, _)| x == h)
            .map(|&(_, id)| id)
            .filter(move |&id| self.ty(id).is_some_and(|t| self.str_at(t.name) == name))
    }

    fn ty(&self, id: u32) -> Option<Type> {
        let p = *self.offsets.get(id as usize).filter(|&&o| o != u32::MAX)? as usize;
        let b = self.types_b();
        let info = u32_at(b, p + 4).ok()?;
        Some(Type {
            name: u32_at(b, p).ok()?,
            kind: (info >> 24) & 0x1f,
            kind_flag: info >> 31 == 1,
            vlen: (info & 0xffff) as usize,
            size_or_type: u32_at(b, p + 8).ok()?,
            body: p + 12,
        })
    }

    /// `i`-th word of the type's extra data, for records of `stride` bytes.
    fn word(&self, t: &Type, i: usize, stride: usize, word: usize) -> u32 {
        u32_at(self.types_b(), t.body + i * stride + word * 4).unwrap_or(0)
    }

    /// Struct/union members: (name, type, bit offset).
    fn members(&self, t: &Type) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let t = *t;
        let n = if matches!(t.kind, KIND_STRUCT | KIND_UNION) {
            t.vlen
        } else {
            0
        };
        (0..n).map(move |i| {
            let off = self.word(&t, i, 12, 2);
            (
                self.word(&t, i, 12, 0),
                self.word(&t, i, 12, 1),
                if t.kind_flag { off & 0xff_ffff } else { off },
            )
        })
    }

    /// Follows typedefs and modifiers to the underlying type id.
    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.ty(id) {
                Some(t)
                    if matches!(
                        t.kind,
                        KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG
                    ) =>
                {
                    id = t.size_or_type
                }
                _ => break,
            }
        }
        id
    }

    /// Bit offset of `name` in struct/union `id`, looking through anonymous members.
    fn member(&self, id: u32, name: &str) -> Option<(u32, u32)> {
        let t = self.ty(self.resolve(id))?;
        for (m_name, m_ty, bit_offset) in self.members(&t) {
            if m_name == 0 {
                let inner = self.resolve(m_ty);
                if let Some((off, ty)) = self.member(inner, name) {
                    return Some((bit_offset + off, ty));
                }
            } else if self.str_at(m_name) == name {
                return Some((bit_offset, m_ty));
            }
        }
        None
    }

    /// Byte offset of a dotted member path inside `struct_name` (e.g. `se.sum_exec_runtime` in
    /// `task_struct`). `None` if this kernel's struct lacks it or it is a bitfield.
    pub fn offset_of(&self, struct_name: &str, path: &str) -> Option<u32> {
        self.named(struct_name).find_map(|id| {
            let t = self.ty(id)?;
            if !matches!(t.kind, KIND_STRUCT | KIND_UNION) || t.vlen == 0 {
                return None;
            }
            let (mut cur, mut bits) = (id, 0u32);
            for part in path.split('.') {
                let (off, ty) = self.member(cur, part)?;
                bits += off;
                cur = ty;
            }
            (bits % 8 == 0).then_some(bits / 8)
        })
    }

    fn func_proto(&self, name: &str) -> Option<Type> {
        let id = self
            .named(name)
            .find(|&id| self.ty(id).is_some_and(|t| t.kind == KIND_FUNC))?;
        let proto = self.ty(self.ty(id)?.size_or_type)?;
        (proto.kind == KIND_FUNC_PROTO).then_some(proto)
    }

    /// A type (of any kind) is named `name`, e.g. the `btf_trace_<tracepoint>` typedefs.
    pub fn has_type(&self, name: &str) -> bool {
        self.named(name).next().is_some()
    }

    /// Kernel function `name` has a BTF `FUNC` entry (what fentry attaches by).
    pub fn has_func(&self, name: &str) -> bool {
        self.func_proto(name).is_some()
    }

    /// The parameters of kernel function `name`, by name and C type, in order.
    pub fn func_signature(&self, name: &str) -> Option<Vec<BtfParam>> {
        let proto = self.func_proto(name)?;
        Some(
            (0..proto.vlen)
                .map(|i| BtfParam {
                    name: self.str_at(self.word(&proto, i, 8, 0)).to_owned(),
                    ty: self.type_name(self.word(&proto, i, 8, 1), 0),
                })
                .collect(),
        )
    }

    /// A C spelling of type `id` (`struct folio *`, `int`, `pmd_t`), enough to tell
    /// signatures apart.
    fn type_name(&self, id: u32, depth: u32) -> String {
        const KIND_INT: u32 = 1;
        const KIND_FWD: u32 = 7;
        let Some(t) = self.ty(id).filter(|_| id != 0 && depth < 16) else {
            return "void".into();
        };
        let name = self.str_at(t.name);
        match t.kind {
            KIND_PTR => format!("{} *", self.type_name(t.size_or_type, depth + 1)),
            KIND_STRUCT => format!("struct {name}"),
            KIND_UNION => format!("union {name}"),
            KIND_ENUM => format!("enum {name}"),
            KIND_FWD => format!("struct {name}"),
            KIND_INT | KIND_TYPEDEF => name.to_owned(),
            KIND_CONST | KIND_VOLATILE | KIND_RESTRICT | KIND_TYPE_TAG => {
                self.type_name(t.size_or_type, depth + 1)
            }
            _ => name.to_owned(),
        }
    }

    /// Size in bytes of struct `name`.
    pub fn struct_size(&self, name: &str) -> Option<u32> {
        self.named(name).find_map(|id| {
            let t = self.ty(id)?;
            (matches!(t.kind, KIND_STRUCT | KIND_UNION) && t.vlen > 0).then_some(t.size_or_type)
        })
    }

    /// Value of `member` of enum `name` (e.g. `PG_head` of `pageflags`).
    pub fn enum_value(&self, name: &str, member: &str) -> Option<i64> {
        self.named(name).find_map(|id| {
            let t = self.ty(id)?;
            if t.kind != KIND_ENUM {
                return None;
            }
            (0..t.vlen)
                .find(|&i| self.str_at(self.word(&t, i, 8, 0)) == member)
                .map(|i| i64::from(self.word(&t, i, 8, 1) as i32))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob: strings, then types as (name, info, size_or_type, extra words).
    fn blob(strings: &[&str], types: &[(u32, u32, u32, Vec<u32>)]) -> Vec<u8> {
        let mut s = vec![0u8];
        for x in strings {
            s.extend_from_slice(x.as_bytes());
            s.push(0);
        }
        let mut t = Vec::new();
        for (name, info, sz, extra) in types {
            for w in [*name, *info, *sz].iter().chain(extra) {
                t.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut b = vec![0x9f, 0xeb, 1, 0];
        for w in [24u32, 0, t.len() as u32, t.len() as u32, s.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend(t);
        b.extend(s);
        b
    }

    fn name_off(strings: &[&str], n: &str) -> u32 {
        let mut off = 1;
        for s in strings {
            if *s == n {
                return off;
            }
            off += s.len() as u32 + 1;
        }
        panic!("{n}")
    }

    #[test]
    fn nested_and_anonymous_members() {
        let st = [
            "u64",
            "sched_entity",
            "sum_exec_runtime",
            "task_struct",
            "se",
            "node_stamp",
            "mm_struct",
            "numa_scan_seq",
            "task_numa_fault",
            "x",
            "pageflags",
            "PG_head",
        ];
        let n = |s| name_off(&st, s);
        let types = vec![
            // 1: int u64
            (n("u64"), 1 << 24, 8, vec![64]),
            // 2: struct sched_entity { u64 pad @0; u64 sum_exec_runtime @64 bits }
            (
                n("sched_entity"),
                (4 << 24) | 2,
                16,
                vec![n("x"), 1, 0, n("sum_exec_runtime"), 1, 64],
            ),
            // 3: struct task_struct { u64 x @0; sched_entity se @128 bits; u64 node_stamp @384 }
            (
                n("task_struct"),
                (4 << 24) | 3,
                64,
                vec![n("x"), 1, 0, n("se"), 2, 128, n("node_stamp"), 1, 384],
            ),
            // 4: anonymous struct { u64 x; int numa_scan_seq @ 64 }
            (
                0,
                (4 << 24) | 2,
                16,
                vec![n("x"), 1, 0, n("numa_scan_seq"), 1, 64],
            ),
            // 5: struct mm_struct { anon @ 0 }
            (n("mm_struct"), (4 << 24) | 1, 16, vec![0, 4, 0]),
            // 6: func_proto (3 params), 7: func task_numa_fault
            (0, (13 << 24) | 3, 0, vec![n("se"), 9, n("x"), 1, 0, 1]),
            (n("task_numa_fault"), 12 << 24, 6, vec![]),
            // 8: enum pageflags { PG_head = 6 }, 9: task_struct *
            (n("pageflags"), (6 << 24) | 1, 4, vec![n("PG_head"), 6]),
            (0, 2 << 24, 3, vec![]),
        ];
        let btf = Btf::parse(&blob(&st, &types)).unwrap();
        assert_eq!(
            btf.offset_of("task_struct", "se.sum_exec_runtime"),
            Some(24)
        );
        assert_eq!(btf.offset_of("task_struct", "node_stamp"), Some(48));
        assert_eq!(btf.offset_of("mm_struct", "numa_scan_seq"), Some(8));
        assert_eq!(btf.offset_of("task_struct", "nope"), None);
        assert_eq!(btf.offset_of("nope", "x"), None);
        let sig = btf.func_signature("task_numa_fault").unwrap();
        let sig: Vec<(&str, &str)> = sig.iter().map(|p| (&*p.name, &*p.ty)).collect();
        assert_eq!(
            sig,
            [("se", "struct task_struct *"), ("x", "u64"), ("", "u64")]
        );
        assert_eq!(btf.func_signature("nope"), None);
        assert_eq!(btf.enum_value("pageflags", "PG_head"), Some(6));
        assert_eq!(btf.enum_value("pageflags", "PG_nope"), None);
        assert_eq!(btf.struct_size("task_struct"), Some(64));
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, not at all").is_err());
        // A kind of unknown size, and a record cut short: refused, not misread.
        assert!(Btf::parse(&blob(&[], &[(0, 25 << 24, 0, vec![])])).is_err());
        assert!(Btf::parse(&blob(&[], &[(0, (4 << 24) | 2, 8, vec![0, 1, 0])])).is_err());
    }

    /// On a machine with kernel BTF, the fields numatrace relies on resolve.
    #[test]
    fn running_kernel_offsets_resolve() {
        let Ok(btf) = Btf::from_sys_fs() else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED running_kernel_offsets_resolve: no /sys/kernel/btf/vmlinux"
            );
            return;
        };
        let se = btf.offset_of("task_struct", "se.sum_exec_runtime");
        assert!(se.is_some());
        assert!(btf.offset_of("task_struct", "mm").is_some());
        assert!(btf.offset_of("sched_entity", "sum_exec_runtime").is_some());
        assert_eq!(
            btf.enum_value("pageflags", "PG_head").map(|v| v >= 0),
            Some(true)
        );
        assert!(btf.struct_size("page").is_some_and(|s| s >= 56));
        if std::path::Path::new("/proc/sys/kernel/numa_balancing").exists() {
            assert!(btf.offset_of("task_struct", "node_stamp").is_some());
            assert!(btf.offset_of("mm_struct", "numa_scan_seq").is_some());
            let sig = btf.func_signature("task_numa_fault").unwrap();
            let names: Vec<&str> = sig.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["last_cpupid", "mem_node", "pages", "flags"]);
        }
    }
}
