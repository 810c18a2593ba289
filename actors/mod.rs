//! actix actors, one per file. Each is a thin shell over the sans-I/O core in `src/`.

/// Wall-clock milliseconds since the Unix epoch: the one clock read the actors make and pass
/// into the core as `now_ms`.
///
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The builder methods every consumer kind shares — where its client instance comes from, and
/// its group — written once. `$group` is the path of the group's field in the builder.
macro_rules! client_and_group_methods {
    ($builder:ty, $($group:ident).+) => {
        impl $builder {
            /// The name servers (`;`-separated): a client instance is created for this
            /// consumer and shut down with it.
            pub fn namesrv_addr(mut self, addr: impl Into<String>) -> Self {
                self.namesrv_addr = Some(addr.into());
                self
            }

            /// Shares an existing client instance (its routes and connections) instead.
            pub fn client(mut self, client: Client) -> Self {
                self.client = Some(client);
                self
            }

            /// The consumer group.
            pub fn group(mut self, group: impl Into<String>) -> Self {
                self.$($group).+ = group.into();
                self
            }

            /// The configuration of the client instance created for this consumer (RPC
            /// hooks, credentials, TLS, timeouts); a `namesrv_addr` given to the builder replaces
            /// its name servers. Not used with [`client`](Self::client): that client has its
            /// own.
            pub fn client_config(mut self, config: $crate::ClientConfig) -> Self {
                self.client_config = Some(config);
                self
            }

            /// Signs every request of the client instance created for this consumer with
            /// `credentials` (for a cluster with ACL; see
            /// [`ClientConfig::credentials`]($crate::ClientConfig::credentials)).
            pub fn credentials(mut self, credentials: $crate::acl::Credentials) -> Self {
                self.client_config
                    .get_or_insert_with(|| $crate::ClientConfig::new(""))
                    .credentials = Some(credentials);
                self
            }
        }
    };
}

/// The `namespace` builder method of every consumer kind. `$namespace` is the path of the
/// namespace field in the builder.
macro_rules! namespace_method {
    ($builder:ty, $($namespace:ident).+) => {
        impl $builder {
            /// The namespace (Java `setNamespace`): the group and topics given to this builder
            /// are `namespace%name` on the wire, and the topics and queues handed back come
            /// without it (see [`crate::namespace`]). Blank: none.
            pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
                self.$($namespace).+ = Some(namespace.into());
                self
            }
        }
    };
}

/// Actors of the embedded broker.
#[cfg(feature = "embedded")]
pub(crate) mod broker;

pub(crate) mod client;
pub(crate) mod connection;
pub(crate) mod consumer;
pub(crate) mod heartbeat;
pub(crate) mod listener;
pub(crate) mod lite_pull;
pub(crate) mod member;
pub(crate) mod offset_store;
pub(crate) mod producer;
pub(crate) mod pull_consumer;
pub(crate) mod puller;
pub(crate) mod queue;
pub(crate) mod queue_orderly;
pub(crate) mod rebalancer;
pub(crate) mod runtime;
pub(crate) mod schedule;
pub(crate) mod supervised_consumer;
