//! Loading numatrace's eBPF object and attaching it as a [`crate::plan::Plan`] says.
pub mod loader;
pub mod needs;

/// The eBPF object built by build.rs (numatrace-ebpf for bpfel-unknown-none), embedded so the
/// binary is self-contained.
#[cfg(not(fuzzing))]
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/numatrace"));
/// cargo fuzz's build has no object (build.rs): its targets read captures and load nothing.
#[cfg(fuzzing)]
pub static OBJECT: &[u8] = &[];

/// The benchmark's per-task lookup programs (numatrace-ebpf's `numatrace-lookups`): a separate
/// object, as its task-storage map does not load on 5.10. numatrace never loads it.
#[cfg(not(fuzzing))]
pub static LOOKUPS_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/numatrace-lookups"));
#[cfg(fuzzing)]
pub static LOOKUPS_OBJECT: &[u8] = &[];

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use numatrace_common::{GLOBALS, LOOKUP_PROGRAMS, LOOKUP_SHARED_MAPS, MAPS, PROGRAMS};
    use object::{Object as _, ObjectSymbol as _};

    fn symbols(object: &[u8]) -> HashSet<String> {
        let file = object::File::parse(object).expect("the embedded eBPF object parses");
        file.symbols()
            .filter(|s| s.is_definition())
            .filter_map(|s| s.name().ok().map(str::to_owned))
            .collect()
    }

    /// Every name the loader looks up (programs, maps, globals) is defined in the object that
    /// is embedded in this binary: a rename on one side only fails here, not at attach time.
    #[test]
    fn the_object_defines_every_program_map_and_global() {
        let defined = symbols(super::OBJECT);
        for name in PROGRAMS.iter().chain(MAPS).chain(GLOBALS) {
            assert!(
                defined.contains(*name),
                "{name} is not defined in the eBPF object"
            );
        }
    }

    /// The benchmark's lookup object defines the programs of every type it names, and
    /// numatrace's own object has no task-storage map to keep it from loading on 5.10.
    #[test]
    fn the_lookup_object_defines_every_pair() {
        let defined = symbols(super::LOOKUPS_OBJECT);
        for (prefix, names) in LOOKUP_PROGRAMS {
            for name in names {
                assert!(name.starts_with(prefix), "{name}: not a {prefix} program");
                assert!(
                    defined.contains(*name),
                    "{name} is not in the lookup object"
                );
            }
        }
        for name in LOOKUP_SHARED_MAPS {
            assert!(
                defined.contains(*name),
                "{name} is not in the lookup object"
            );
        }
        // By type, whatever the name: a task-storage map keeps an object from loading on 5.10.
        let task_storage = |object: &[u8]| {
            aya_obj::Object::parse(object)
                .expect("the embedded eBPF object parses")
                .maps
                .values()
                .filter(|m| {
                    m.map_type()
                        == aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as u32
                })
                .count()
        };
        assert_eq!(task_storage(super::LOOKUPS_OBJECT), 1);
        assert_eq!(
            task_storage(super::OBJECT),
            0,
            "numatrace's object has a task-storage map"
        );
    }
}
