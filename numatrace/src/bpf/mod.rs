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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use numatrace_common::{GLOBALS, MAPS, PROGRAMS};
    use object::{Object as _, ObjectSymbol as _};

    /// Every name the loader looks up (programs, maps, globals) is defined in the object that
    /// is embedded in this binary: a rename on one side only fails here, not at attach time.
    #[test]
    fn the_object_defines_every_program_map_and_global() {
        let file = object::File::parse(super::OBJECT).expect("the embedded eBPF object parses");
        let defined: HashSet<&str> = file
            .symbols()
            .filter(|s| s.is_definition())
            .filter_map(|s| s.name().ok())
            .collect();
        for name in PROGRAMS.iter().chain(MAPS).chain(GLOBALS) {
            assert!(
                defined.contains(name),
                "{name} is not defined in the eBPF object"
            );
        }
    }
}
