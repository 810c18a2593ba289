//! [`Admin`] against the embedded cluster: topics created, read, updated and deleted on chosen
//! brokers, each queue's stored range, subscription groups and their deletion with their
//! offsets, a broker's runtime figures, and selections that match no broker.

mod common;

use rocketmq_actor::admin::{Admin, Brokers, SubscriptionGroupConfig, TopicConfig};
use rocketmq_actor::{Error, MessageQueue};

use common::{producer, send_numbered};

#[actix_rt::test]
async fn topics_are_created_read_updated_and_deleted_where_asked() {
    let cluster = common::fast_retry_cluster(2).await;
    let admin = Admin::new(common::client(&cluster));

    let mut orders = TopicConfig::new("Orders", 3);
    orders.order = true;
    let created = admin
        .create_topic(&Brokers::Broker("broker-b".into()), &orders)
        .await
        .expect("create on broker-b");
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].broker_name, "broker-b");
    assert!(admin
        .topic_list()
        .await
        .expect("list")
        .contains(&"Orders".to_owned()));
    let on_a = admin
        .masters(&Brokers::Broker("broker-a".into()))
        .await
        .expect("a");
    assert_eq!(
        admin
            .topic_config(&on_a[0].addr, "Orders")
            .await
            .expect("ask a"),
        None,
        "broker-a was not asked to create it"
    );
    let mut read = admin
        .topic_config(&created[0].addr, "Orders")
        .await
        .expect("ask b")
        .expect("b has it");
    assert_eq!(read, orders);

    read.write_queue_nums = 5;
    read.perm = 4;
    admin
        .put_topic_config(&created[0].addr, &read)
        .await
        .expect("update");
    let all = admin
        .topic_configs(&created[0].addr)
        .await
        .expect("all topics of b");
    assert_eq!(all.get("Orders"), Some(&read));
    assert!(all.contains_key("TBW102"), "system topics are listed too");

    let route = admin.client().refresh_route("Orders").await.expect("route");
    assert_eq!(route.data.queue_datas[0].write_queue_nums, 5);
    assert_eq!(route.data.queue_datas[0].perm, 4);

    admin
        .delete_topic(&Brokers::All, "Orders")
        .await
        .expect("delete");
    assert!(!admin
        .topic_list()
        .await
        .expect("list")
        .contains(&"Orders".to_owned()));
    assert_eq!(
        admin
            .topic_config(&created[0].addr, "Orders")
            .await
            .expect("ask"),
        None
    );
    cluster.shutdown().await;
}

#[actix_rt::test]
async fn queue_ranges_groups_and_runtime_figures() {
    let cluster = common::fast_retry_cluster(1).await;
    let admin = Admin::new(common::client(&cluster));
    admin
        .create_topic(
            &Brokers::Cluster("DefaultCluster".into()),
            &TopicConfig::new("Ledger", 2),
        )
        .await
        .expect("create in the cluster");
    let before = common::now_ms();
    send_numbered(&producer(&cluster), "Ledger", 0..9).await;
    let master = &admin.masters(&Brokers::All).await.expect("masters")[0];

    let stats = admin
        .topic_stats(&master.addr, "Ledger")
        .await
        .expect("stats");
    assert_eq!(stats.offset_table.len(), 2);
    let stored: i64 = stats
        .offset_table
        .values()
        .map(|o| o.max_offset - o.min_offset)
        .sum();
    assert_eq!(stored, 9);
    let queue = MessageQueue::new("Ledger", "broker-a", 0);
    assert!(stats.offset_table[&queue].last_update_timestamp >= before);
    let missing = admin.topic_stats(&master.addr, "NoSuchTopic").await;
    assert_eq!(
        missing.expect_err("no stats").response_code(),
        Some(rocketmq_actor::protocol::codes::response_code::TOPIC_NOT_EXIST)
    );

    let mut audit = SubscriptionGroupConfig::new("audit");
    audit.retry_max_times = 3;
    admin
        .put_subscription_group(&master.addr, &audit)
        .await
        .expect("create group");
    let queue0 = MessageQueue::new("Ledger", "broker-a", 0);
    admin
        .client()
        .update_consumer_offset("audit", &queue0, 4)
        .await
        .expect("a committed offset");
    assert_eq!(
        cluster
            .committed_offset("broker-a", "audit", "Ledger", 0)
            .await
            .expect("ask"),
        Some(4)
    );
    let groups = admin
        .subscription_groups(&master.addr)
        .await
        .expect("groups");
    assert_eq!(groups.get("audit"), Some(&audit));

    admin
        .delete_group(&Brokers::All, "audit", true)
        .await
        .expect("delete group");
    assert!(!admin
        .subscription_groups(&master.addr)
        .await
        .expect("groups")
        .contains_key("audit"));
    assert_eq!(
        cluster
            .committed_offset("broker-a", "audit", "Ledger", 0)
            .await
            .expect("ask"),
        None,
        "clean_offset deletes the group's offsets"
    );

    let info = admin
        .broker_runtime_info(&master.addr)
        .await
        .expect("runtime info");
    assert_eq!(
        info.get("msgPutTotalTodayNow").map(String::as_str),
        Some("9")
    );
    assert!(info.get("brokerVersionDesc").is_some_and(|v| !v.is_empty()));

    let nowhere = admin.masters(&Brokers::Cluster("Elsewhere".into())).await;
    assert!(
        matches!(&nowhere, Err(Error::Config { value, .. }) if value == "Elsewhere"),
        "{nowhere:?}"
    );
    cluster.shutdown().await;
}
