//! The `rocketmq-actor` command line: produce, consume, inspect a cluster (topic routes, a
//! group's progress and connections, stored messages), reset offsets, run the embedded broker,
//! or all at once (`demo`). The subcommands live in `src/cli/`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

mod cli;

use cli::admin::{
    ConsumerConnectionsArgs, ConsumerProgressArgs, QueryMsgArgs, ResetOffsetArgs, TopicRouteArgs,
};
use cli::consume::ConsumeArgs;
use cli::embedded::{BrokerArgs, DemoArgs};
use cli::produce::ProduceArgs;
use cli::{CliResult, Failure, Outcome};

/// The exit statuses, shown by `--help`.
const EXIT_STATUS: &str = "\
Exit status:
  0    done. `broker`, and `consume` without --count/--exit-at-end, run until SIGINT or SIGTERM:
       that is their normal end, and 0 too
  1    error: a name server or broker that does not answer (within --request-timeout) or fails
       the request, failed sends, stdout closed
  2    usage: invalid or conflicting arguments
  130  interrupted: SIGINT or SIGTERM before the command was done (`consume` before --count or
       --exit-at-end was reached, `produce` before everything was sent). What was printed is
       committed; the summary line is printed";

#[derive(Parser)]
#[command(
    name = "rocketmq-actor",
    version,
    about = "Actor-based Apache RocketMQ client",
    after_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send synthetic messages (--count) or the lines of a file or stdin (--file PATH|-); print
    /// a JSON summary line.
    #[command(after_help = EXIT_STATUS)]
    Produce(ProduceArgs),
    /// Consume, printing each message (--format) and a JSON summary line.
    #[command(after_help = EXIT_STATUS)]
    Consume(ConsumeArgs),
    /// Print a topic's route: one JSON line per broker (addresses, queues, permission).
    #[command(after_help = EXIT_STATUS)]
    TopicRoute(TopicRouteArgs),
    /// Print a group's progress: one JSON line per queue (broker and committed offsets, lag,
    /// owning client).
    #[command(after_help = EXIT_STATUS)]
    ConsumerProgress(ConsumerProgressArgs),
    /// Print a group's connected clients: one JSON line per client.
    #[command(after_help = EXIT_STATUS)]
    ConsumerConnections(ConsumerConnectionsArgs),
    /// Print the stored message of an offset message id as a JSON line.
    #[command(after_help = EXIT_STATUS)]
    QueryMsg(QueryMsgArgs),
    /// Reset a group's offsets of a topic by time (as mqadmin resetOffsetByTime) and print the
    /// new offset of each queue as a JSON line.
    #[command(after_help = EXIT_STATUS)]
    ResetOffset(ResetOffsetArgs),
    /// Run the embedded RocketMQ-compatible broker (name server + brokers on loopback) until
    /// SIGINT or SIGTERM.
    #[command(after_help = EXIT_STATUS)]
    Broker(BrokerArgs),
    /// Start the embedded broker, produce, consume with a push consumer, print both summaries.
    #[command(after_help = EXIT_STATUS)]
    Demo(DemoArgs),
}

impl Command {
    /// The checks clap cannot make on one argument: the subcommand's name and the complaint.
    fn validate(&self) -> Result<(), (&'static str, String)> {
        match self {
            Command::Consume(args) => args.validate().map_err(|e| ("consume", e)),
            _ => Ok(()),
        }
    }

    async fn run(self) -> CliResult {
        match self {
            Command::Produce(args) => cli::produce::produce(&args).await,
            Command::Consume(args) => cli::consume::consume(&args).await,
            Command::TopicRoute(args) => cli::admin::topic_route(&args).await,
            Command::ConsumerProgress(args) => cli::admin::consumer_progress(&args).await,
            Command::ConsumerConnections(args) => cli::admin::consumer_connections(&args).await,
            Command::QueryMsg(args) => cli::admin::query_msg(&args).await,
            Command::ResetOffset(args) => cli::admin::reset_offset(&args).await,
            Command::Broker(args) => cli::embedded::broker(args).await,
            Command::Demo(args) => cli::embedded::demo(args).await,
        }
    }
}

/// Exits with status 2 and clap's rendering of `message` for `subcommand`.
fn usage_error(subcommand: &str, message: &str) -> ! {
    let mut root = Cli::command();
    root.build();
    match root.find_subcommand_mut(subcommand) {
        Some(command) => command.error(ErrorKind::ArgumentConflict, message).exit(),
        None => root.error(ErrorKind::ArgumentConflict, message).exit(),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // Usage errors (and --help, --version) end here, with clap's exit status 2 (0).
    let cli = Cli::parse();
    if let Err((subcommand, message)) = cli.command.validate() {
        usage_error(subcommand, &message);
    }
    let system = actix::System::new();
    match system.block_on(cli.command.run()) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::Interrupted) => ExitCode::from(130),
        Err(Failure(message)) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
