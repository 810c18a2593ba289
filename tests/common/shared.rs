//! [`Shared`]: test state a `Send` listener can hold.

/// A value shared between a test and its listener: listeners are `Send` (a consumer may run on
/// another thread), so test state lives behind a mutex, with the `Cell`/`RefCell` vocabulary.
pub struct Shared<T>(std::sync::Arc<std::sync::Mutex<T>>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T> Shared<T> {
    /// A new shared value.
    pub fn new(value: T) -> Self {
        Shared(std::sync::Arc::new(std::sync::Mutex::new(value)))
    }

    /// The value, locked (a panic elsewhere does not hide it).
    pub fn borrow(&self) -> std::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value, locked for change.
    pub fn borrow_mut(&self) -> std::sync::MutexGuard<'_, T> {
        self.borrow()
    }

    /// Replaces the value.
    pub fn set(&self, value: T) {
        *self.borrow() = value;
    }
}

impl<T: Copy> Shared<T> {
    /// A copy of the value.
    pub fn get(&self) -> T {
        *self.borrow()
    }
}
