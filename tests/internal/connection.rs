//! The connection actor against a scripted in-test TCP server speaking the remoting protocol.

use std::time::Duration;

use actix::prelude::*;
use futures::{SinkExt, StreamExt};
use rocketmq_actor::actors::connection::{
    Connection, ConnectionEvent, Oneway, RegisterHandler, Request, ServerRequest, Subscribe,
};
use rocketmq_actor::protocol::codes::{request_code, response_code};
use rocketmq_actor::protocol::{RemotingCodec, RemotingCommand};
use rocketmq_actor::Error;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

type ServerSide = Framed<TcpStream, RemotingCodec>;

async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

async fn accept(listener: &TcpListener) -> ServerSide {
    let (socket, _) = listener.accept().await.unwrap();
    Framed::new(socket, RemotingCodec::default())
}

async fn next_request(server: &mut ServerSide) -> RemotingCommand {
    server.next().await.unwrap().unwrap()
}

fn request(n: usize, timeout: Duration) -> Request {
    Request {
        command: RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC)
            .with_ext("topic", format!("T{n}")),
        timeout,
    }
}

#[actix_rt::test]
async fn responses_out_of_order_reach_their_own_callers() {
    let (listener, addr) = listen().await;
    let server = actix_rt::spawn(async move {
        let mut server = accept(&listener).await;
        let mut requests = Vec::new();
        for _ in 0..5 {
            requests.push(next_request(&mut server).await);
        }
        // Answer in reverse order, echoing the topic in the remark.
        for request in requests.iter().rev() {
            let topic = request.ext("topic").map(str::to_owned);
            server
                .send(RemotingCommand::response_to(
                    request,
                    response_code::SUCCESS,
                    topic,
                ))
                .await
                .unwrap();
        }
        server
    });
    let conn = Connection::new(addr).start();
    let calls = (0..5).map(|n| conn.send(request(n, Duration::from_secs(10))));
    let responses = futures::future::join_all(calls).await;
    for (n, response) in responses.into_iter().enumerate() {
        let response = response.unwrap().unwrap();
        assert!(response.is_response());
        assert_eq!(response.remark.as_deref(), Some(format!("T{n}").as_str()));
    }
    drop(server.await.unwrap());
}

#[actix_rt::test]
async fn an_unanswered_request_times_out_without_disturbing_others() {
    let (listener, addr) = listen().await;
    let (late_tx, late_rx) = tokio::sync::oneshot::channel::<()>();
    let server = actix_rt::spawn(async move {
        let mut server = accept(&listener).await;
        let ignored = next_request(&mut server).await;
        let answered = next_request(&mut server).await;
        server
            .send(RemotingCommand::response_to(
                &answered,
                response_code::SUCCESS,
                None,
            ))
            .await
            .unwrap();
        // Answer the ignored request only after the client gave up on it.
        late_rx.await.unwrap();
        server
            .send(RemotingCommand::response_to(
                &ignored,
                response_code::SUCCESS,
                None,
            ))
            .await
            .unwrap();
        let after = next_request(&mut server).await;
        server
            .send(RemotingCommand::response_to(
                &after,
                response_code::SUCCESS,
                Some("after".into()),
            ))
            .await
            .unwrap();
        server
    });
    let conn = Connection::new(addr).start();
    let slow = conn.send(request(0, Duration::from_millis(200)));
    let fast = conn.send(request(1, Duration::from_secs(10)));
    let (slow, fast) = futures::join!(slow, fast);
    assert!(fast.unwrap().is_ok());
    match slow.unwrap() {
        Err(Error::Timeout { code, .. }) => {
            assert_eq!(code.0, request_code::GET_ROUTEINFO_BY_TOPIC)
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    late_tx.send(()).unwrap();
    // The late response is dropped; the connection keeps working.
    let after = conn
        .send(request(2, Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.remark.as_deref(), Some("after"));
    drop(server.await.unwrap());
}

struct RunningInfoHandler;

impl Actor for RunningInfoHandler {
    type Context = Context<Self>;
}

impl Handler<ServerRequest> for RunningInfoHandler {
    type Result = Option<RemotingCommand>;

    fn handle(&mut self, msg: ServerRequest, _ctx: &mut Self::Context) -> Self::Result {
        let group = msg
            .command
            .ext("consumerGroup")
            .unwrap_or_default()
            .to_owned();
        Some(
            RemotingCommand::response(response_code::SUCCESS, None)
                .with_body(bytes::Bytes::from(format!("running info of {group}"))),
        )
    }
}

#[actix_rt::test]
async fn server_initiated_requests_reach_their_handler_or_get_not_supported() {
    let (listener, addr) = listen().await;
    let conn = Connection::new(addr).start();
    let handler = RunningInfoHandler.start();
    conn.send(RegisterHandler {
        code: Some(request_code::GET_CONSUMER_RUNNING_INFO),
        handler: handler.downgrade().recipient(),
    })
    .await
    .unwrap();
    let client_call = conn.send(request(0, Duration::from_secs(10)));
    let server = async move {
        let mut server = accept(&listener).await;
        let first = next_request(&mut server).await;
        // A registered code: answered by the handler, with our opaque.
        let mut running_info = RemotingCommand::request(request_code::GET_CONSUMER_RUNNING_INFO)
            .with_ext("consumerGroup", "g1");
        running_info.opaque = 77;
        server.send(running_info).await.unwrap();
        let answer = next_request(&mut server).await;
        assert!(answer.is_response());
        assert_eq!(answer.opaque, 77);
        assert_eq!(answer.code, response_code::SUCCESS);
        assert_eq!(answer.body.as_deref(), Some(&b"running info of g1"[..]));
        // A one-way request without a handler is not answered; an unknown code is refused.
        let mut notify = RemotingCommand::request(request_code::NOTIFY_CONSUMER_IDS_CHANGED)
            .with_ext("consumerGroup", "g1");
        notify.mark_oneway();
        server.send(notify).await.unwrap();
        let mut unknown = RemotingCommand::request(9999);
        unknown.opaque = 78;
        server.send(unknown).await.unwrap();
        let refusal = next_request(&mut server).await;
        assert_eq!(refusal.opaque, 78, "the one-way request got no answer");
        assert_eq!(refusal.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
        server
            .send(RemotingCommand::response_to(
                &first,
                response_code::SUCCESS,
                None,
            ))
            .await
            .unwrap();
        server
    };
    let (response, server) = futures::join!(client_call, server);
    assert!(response.unwrap().is_ok());
    drop(server);
}

#[actix_rt::test]
async fn a_dropped_connection_fails_every_pending_request_then_reconnects() {
    let (listener, addr) = listen().await;
    let conn = Connection::new(addr).start();
    let events = EventLog::default().start();
    conn.send(Subscribe(events.downgrade().recipient()))
        .await
        .unwrap();
    let calls: Vec<_> = (0..4)
        .map(|n| conn.send(request(n, Duration::from_secs(60))))
        .collect();
    let server = async {
        let mut server = accept(&listener).await;
        for _ in 0..4 {
            next_request(&mut server).await;
        }
        drop(server);
    };
    let (results, ()) = futures::join!(futures::future::join_all(calls), server);
    for result in results {
        // A peer that hangs up before answering anything is told apart (it may want TLS).
        let result = result.unwrap();
        assert!(matches!(result, Err(Error::HungUp { .. })), "{result:?}");
    }
    // The next request reconnects (after the backoff) and succeeds.
    let call = conn.send(request(9, Duration::from_secs(10)));
    let server = async {
        let mut server = accept(&listener).await;
        let r = next_request(&mut server).await;
        server
            .send(RemotingCommand::response_to(
                &r,
                response_code::SUCCESS,
                None,
            ))
            .await
            .unwrap();
        server
    };
    let (result, _server) = futures::join!(call, server);
    assert!(result.unwrap().is_ok());
    let seen = events.send(TakeEvents).await.unwrap();
    let kinds: Vec<&str> = seen
        .iter()
        .map(|e| match e {
            ConnectionEvent::Connected { .. } => "connected",
            ConnectionEvent::Disconnected { .. } => "disconnected",
        })
        .collect();
    assert_eq!(kinds, vec!["connected", "disconnected", "connected"]);
}

#[actix_rt::test]
async fn a_malformed_frame_closes_only_that_connection() {
    let (listener, addr) = listen().await;
    let conn = Connection::new(addr).start();
    let pending = conn.send(request(0, Duration::from_secs(60)));
    let server = async {
        let (mut socket, _) = listener.accept().await.unwrap();
        // A frame announcing 2 GiB: over the limit.
        socket
            .write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0])
            .await
            .unwrap();
        socket
    };
    let (result, _socket) = futures::join!(pending, server);
    assert!(matches!(result.unwrap(), Err(Error::ConnectionClosed(_))));
    // A one-way send reconnects; the actor is alive.
    let oneway = conn.send(Oneway {
        command: RemotingCommand::request(request_code::UPDATE_CONSUMER_OFFSET),
    });
    let server = async {
        let mut server = accept(&listener).await;
        next_request(&mut server).await
    };
    let (sent, received) = futures::join!(oneway, server);
    assert!(sent.unwrap().is_ok());
    assert!(received.is_oneway());
    assert_eq!(received.code, request_code::UPDATE_CONSUMER_OFFSET);
}

#[actix_rt::test]
async fn connecting_to_a_closed_port_fails_with_a_connect_error() {
    let (listener, addr) = listen().await;
    drop(listener);
    let conn = Connection::new(addr).start();
    let result = conn
        .send(request(0, Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(matches!(result, Err(Error::Connect { .. })), "{result:?}");
}

#[derive(Default)]
struct EventLog(Vec<ConnectionEvent>);

impl Actor for EventLog {
    type Context = Context<Self>;
}

impl Handler<ConnectionEvent> for EventLog {
    type Result = ();
    fn handle(&mut self, msg: ConnectionEvent, _ctx: &mut Self::Context) {
        self.0.push(msg);
    }
}

#[derive(Message)]
#[rtype(result = "Vec<ConnectionEvent>")]
struct TakeEvents;

impl Handler<TakeEvents> for EventLog {
    type Result = MessageResult<TakeEvents>;
    fn handle(&mut self, _msg: TakeEvents, _ctx: &mut Self::Context) -> Self::Result {
        MessageResult(std::mem::take(&mut self.0))
    }
}
