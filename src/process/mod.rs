//! The process itself: its memory allocator and its threads' scheduling.

pub mod allocator;
pub mod sched;
