//! The daemon's malloc settings (`gpuwatch::pages::one_malloc_arena`): the threshold above
//! which a block the heap cannot hold is mapped on its own stays at 64 KiB. glibc's default
//! rises to the size of each mapped block freed (up to 32 MiB), after which the daemon's large
//! answers would grow the heap and leave it grown. Its own test binary: the settings are the
//! process's.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn blocks_the_heap_cannot_hold_are_mapped_after_a_larger_one_was_freed() {
    use gpuwatch::pages::{heap_bytes, one_malloc_arena};
    one_malloc_arena();
    // Without the fixed threshold, freeing this mapped block raises glibc's to 8 MiB.
    drop(std::hint::black_box(vec![1u8; 8 << 20]));
    let (_, _, mapped_before) = heap_bytes().expect("glibc");
    let answer = std::hint::black_box(vec![1u8; 2 << 20]);
    let (_, _, mapped) = heap_bytes().expect("glibc");
    assert!(
        mapped >= mapped_before + answer.len(),
        "a 2 MiB block grew the heap ({mapped_before} -> {mapped} bytes mapped)"
    );
    drop(answer);
    let (_, _, mapped_after) = heap_bytes().expect("glibc");
    assert_eq!(
        mapped_after, mapped_before,
        "a freed mapped block is given back"
    );
}
