//! [`Topic`]: a message's topic name, shared rather than copied.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A topic name: an immutable string that clones by reference count.
///
/// Every message of one pull names the same topic, so decoding gives them one shared name
/// instead of a copy each (an allocation per message less on the consume path). It reads
/// like a `&str` (it dereferences to one), compares with `str`, `&str` and `String`, and is
/// made from either with `into()`.
///
/// ```
/// use rocketmq_actor::message::Topic;
/// use rocketmq_actor::Message;
/// let mut message = Message::new("TopicTest", "hello");
/// assert_eq!(message.topic, "TopicTest");
/// assert!(message.topic.starts_with("Topic"));
/// message.topic = format!("ns%{}", message.topic).into();
/// let shared: Topic = message.topic.clone(); // no copy of the text
/// assert_eq!(shared.as_str(), "ns%TopicTest");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Topic(Arc<str>);

impl Topic {
    /// The name as a `&str`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    #[cfg(test)]
    /// Whether `self` and `other` share one text (a clone of the other), not merely equal ones.
    pub(crate) fn shares_text_with(&self, other: &Topic) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for Topic {
    fn default() -> Self {
        Topic(Arc::from(""))
    }
}

impl Deref for Topic {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Topic {
    fn from(name: &str) -> Self {
        Topic(Arc::from(name))
    }
}

impl From<String> for Topic {
    fn from(name: String) -> Self {
        Topic(Arc::from(name))
    }
}

impl From<&String> for Topic {
    fn from(name: &String) -> Self {
        Topic(Arc::from(name.as_str()))
    }
}

impl From<Arc<str>> for Topic {
    fn from(name: Arc<str>) -> Self {
        Topic(name)
    }
}

impl From<&Topic> for Topic {
    fn from(name: &Topic) -> Self {
        name.clone()
    }
}

impl From<Topic> for String {
    fn from(topic: Topic) -> Self {
        topic.0.as_ref().to_owned()
    }
}

impl From<Topic> for Arc<str> {
    fn from(topic: Topic) -> Self {
        topic.0
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Topic {
    fn eq(&self, other: &String) -> bool {
        &*self.0 == other.as_str()
    }
}

impl PartialEq<Topic> for str {
    fn eq(&self, other: &Topic) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Topic> for &str {
    fn eq(&self, other: &Topic) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<Topic> for String {
    fn eq(&self, other: &Topic) -> bool {
        self.as_str() == &*other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_topic_reads_and_compares_like_its_text() {
        let topic = Topic::from("TopicTest");
        assert_eq!(topic, "TopicTest");
        assert_eq!("TopicTest", topic);
        assert_eq!(topic, String::from("TopicTest"));
        assert_eq!(topic.len(), 9);
        assert_eq!(format!("{topic} {topic:?}"), "TopicTest \"TopicTest\"");
        assert_eq!(String::from(topic.clone()), "TopicTest");
        let set: HashSet<Topic> = [topic.clone()].into_iter().collect();
        assert!(set.contains("TopicTest"), "hashes like str (Borrow<str>)");
        assert!(Topic::default().is_empty());
    }

    #[test]
    fn clones_share_the_text_and_equal_names_need_not() {
        let topic = Topic::from("T");
        assert!(topic.clone().shares_text_with(&topic));
        let other = Topic::from("T");
        assert_eq!(other, topic);
        assert!(!other.shares_text_with(&topic));
    }
}
