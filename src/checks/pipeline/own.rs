//! Each check's own per-request state, kept in the request's [`super::Ctx`] under its type,
//! so the pipeline carries it without knowing any check.
//!
//! A handful of inline slots (as many kinds of state as the table's checks keep, with room to
//! spare) rather than a map: a lookup compares at most that many type ids, and the only
//! allocation is the box of a state that is kept.

use std::any::Any;

/// More than the kinds of state the checks keep (today: rate limit, budget, guardrail, cache).
const SLOTS: usize = 6;

type State = Box<dyn Any + Send + Sync>;

#[derive(Default)]
pub(super) struct Own([Option<State>; SLOTS]);

impl Own {
    fn find<T: Any>(&self) -> Option<usize> {
        self.0.iter().position(|s| s.as_ref().is_some_and(|b| b.is::<T>()))
    }

    pub(super) fn get<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        let i = self.find::<T>()?;
        self.0[i].as_mut()?.downcast_mut()
    }

    pub(super) fn put<T: Any + Send + Sync>(&mut self, state: T) {
        if let Some(slot) = self.get::<T>() {
            *slot = state;
            return;
        }
        let free = self.0.iter_mut().find(|s| s.is_none());
        *free.expect("more kinds of check state than slots") = Some(Box::new(state));
    }

    pub(super) fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let i = self.find::<T>()?;
        let state = self.0[i].take()?.downcast::<T>().ok()?;
        Some(*state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_has_its_own_slot() {
        let mut own = Own::default();
        assert_eq!(own.get::<u32>(), None);
        own.put(1u32);
        own.put("a");
        own.put(2u32);
        assert_eq!(own.get::<u32>(), Some(&mut 2));
        assert_eq!(own.take::<&str>(), Some("a"));
        assert_eq!(own.take::<&str>(), None);
        assert_eq!(own.take::<u32>(), Some(2));
        assert!(own.0.iter().all(Option::is_none));
    }
}
