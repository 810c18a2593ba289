//! Evaluating a SQL92 selector over one message's properties, as the embedded broker does for
//! every message a SQL92 pull scans: the properties a Java producer and broker put on a
//! message plus three user properties, and a typical three-clause expression.
//!
//! Run: `cargo bench --bench sql_filter -- --warm-up-time 1 --measurement-time 3`
//! The target (issue 45): ≤ 200 ns per message for a three-clause expression.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rocketmq_actor::filter::SqlFilter;
use rocketmq_actor::message::{property, Message};

const THREE_CLAUSES: &str = "region = 'eu' AND amount > 100 AND TAGS IN ('paid', 'refunded')";

fn order(region: &str, amount: u32, tag: &str) -> Message {
    Message::new("Orders", "body")
        .with_property(property::UNIQ_KEY, "AC110001000018B4AAC2530DD1B20000")
        .with_keys("order-42 user-7")
        .with_tags(tag)
        .with_property(property::WAIT, "true")
        .with_property(property::CLUSTER, "DefaultCluster")
        .with_property(property::MIN_OFFSET, "0")
        .with_property(property::MAX_OFFSET, "123456")
        .with_property("region", region)
        .with_property("amount", amount.to_string())
        .with_property("channel", "web")
}

fn bench_sql(c: &mut Criterion) {
    let filter = SqlFilter::compile(THREE_CLAUSES).unwrap();
    let selected = order("eu", 250, "paid");
    let rejected_last = order("eu", 250, "cancelled");
    let rejected_first = order("us", 250, "paid");
    assert!(filter.matches(&selected.properties));
    assert!(!filter.matches(&rejected_last.properties));
    assert!(!filter.matches(&rejected_first.properties));
    let mut group = c.benchmark_group("sql92");
    group.throughput(Throughput::Elements(1));
    group.bench_function("three_clauses_selected", |b| {
        b.iter(|| filter.matches(black_box(&selected.properties)))
    });
    group.bench_function("three_clauses_rejected_by_the_last", |b| {
        b.iter(|| filter.matches(black_box(&rejected_last.properties)))
    });
    group.bench_function("three_clauses_rejected_by_the_first", |b| {
        b.iter(|| filter.matches(black_box(&rejected_first.properties)))
    });
    group.bench_function("compile_three_clauses", |b| {
        b.iter(|| SqlFilter::compile(black_box(THREE_CLAUSES)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench_sql);
criterion_main!(benches);
