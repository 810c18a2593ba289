//! The `rocketmq-actor` command line: produce, consume, administer a cluster as mqadmin does
//! (topics, groups, offsets, clusters, brokers, stored messages), run the embedded broker, or
//! all at once (`demo`). The subcommands live in `src/cli/`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

mod cli;

use cli::admin::{
    ConsumerConnectionsArgs, ConsumerProgressArgs, QueryMsgArgs, ResetOffsetArgs, TopicArgs,
};
use cli::consume::ConsumeArgs;
use cli::embedded::{BrokerArgs, DemoArgs};
use cli::manage::{
    ClusterArgs, GroupDeleteArgs, GroupListArgs, TopicCreateArgs, TopicDeleteArgs, TopicListArgs,
    TopicUpdateArgs,
};
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
    /// Print no progress line and no warnings: only data, summaries and errors (RUST_LOG, when
    /// set, still decides what is logged).
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Send synthetic messages (--count) or the lines of a file or stdin (--file PATH|-); print
    /// a JSON summary line.
    #[command(after_help = EXIT_STATUS)]
    Produce(ProduceArgs),
    /// Consume, printing each message (--format) on stdout and a JSON summary line on stderr.
    #[command(after_help = EXIT_STATUS)]
    Consume(ConsumeArgs),
    /// Topics: create, update, delete, list, status, route.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Consumer groups: list, delete, progress, connections.
    #[command(subcommand)]
    Group(GroupCommand),
    /// A group's offsets: reset.
    #[command(subcommand)]
    Offset(OffsetCommand),
    /// The clusters the name servers know: list.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// `broker status`: a broker's runtime figures. Without a subcommand: run the embedded
    /// RocketMQ-compatible broker (name server + brokers on loopback) until SIGINT or SIGTERM.
    #[command(after_help = EXIT_STATUS, args_conflicts_with_subcommands = true)]
    Broker(BrokerCli),
    /// Print the stored message of an offset message id as a JSON line.
    #[command(after_help = EXIT_STATUS)]
    QueryMsg(QueryMsgArgs),
    /// Start the embedded broker, produce, consume with a push consumer, print both summaries.
    #[command(after_help = EXIT_STATUS)]
    Demo(DemoArgs),
    /// Print a shell completion script: `rocketmq-actor completions bash > ~/.local/share/bash-completion/completions/rocketmq-actor`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The same as `topic route` (the name before `topic`).
    #[command(hide = true, after_help = EXIT_STATUS)]
    TopicRoute(TopicArgs),
    /// The same as `group progress`.
    #[command(hide = true, after_help = EXIT_STATUS)]
    ConsumerProgress(ConsumerProgressArgs),
    /// The same as `group connections`.
    #[command(hide = true, after_help = EXIT_STATUS)]
    ConsumerConnections(ConsumerConnectionsArgs),
    /// The same as `offset reset`.
    #[command(hide = true, after_help = EXIT_STATUS)]
    ResetOffset(ResetOffsetArgs),
}

/// `topic …`.
#[derive(Subcommand)]
enum TopicCommand {
    /// Create a topic (or update it) on every broker, or on those of --cluster / --broker; a
    /// line per broker (mqadmin updateTopic).
    #[command(after_help = EXIT_STATUS)]
    Create(TopicCreateArgs),
    /// Change a topic's queues, permission or order flag, keeping what is not given; a line
    /// per broker.
    #[command(after_help = EXIT_STATUS)]
    Update(TopicUpdateArgs),
    /// Delete a topic from the brokers and the name servers (mqadmin deleteTopic).
    #[command(after_help = EXIT_STATUS)]
    Delete(TopicDeleteArgs),
    /// List the topics, a line each; system topics with --all (mqadmin topicList).
    #[command(after_help = EXIT_STATUS)]
    List(TopicListArgs),
    /// Each queue's stored offsets and last store time (mqadmin topicStatus).
    #[command(after_help = EXIT_STATUS)]
    Status(TopicArgs),
    /// A topic's route: a line per broker (addresses, queues, permission) (mqadmin topicRoute).
    #[command(after_help = EXIT_STATUS)]
    Route(TopicArgs),
}

/// `group …`.
#[derive(Subcommand)]
enum GroupCommand {
    /// List the consumer groups the brokers know, a line each; the brokers' own with --all.
    #[command(after_help = EXIT_STATUS)]
    List(GroupListArgs),
    /// Delete a consumer group from the brokers (mqadmin deleteSubGroup).
    #[command(after_help = EXIT_STATUS)]
    Delete(GroupDeleteArgs),
    /// A group's progress: a line per queue (broker and committed offsets, lag, owning client)
    /// (mqadmin consumerProgress).
    #[command(after_help = EXIT_STATUS)]
    Progress(ConsumerProgressArgs),
    /// A group's connected clients: a line per client (mqadmin consumerConnection).
    #[command(after_help = EXIT_STATUS)]
    Connections(ConsumerConnectionsArgs),
}

/// `offset …`.
#[derive(Subcommand)]
enum OffsetCommand {
    /// Reset a group's offsets of a topic by time and print the new offset of each queue
    /// (mqadmin resetOffsetByTime).
    #[command(after_help = EXIT_STATUS)]
    Reset(ResetOffsetArgs),
}

/// `cluster …`.
#[derive(Subcommand)]
enum ClusterCommand {
    /// A line per broker server: cluster, broker, id, address, version, today's messages
    /// (mqadmin clusterList).
    #[command(after_help = EXIT_STATUS)]
    List(ClusterArgs),
}

/// `broker`: `broker status`, or the embedded broker's options.
#[derive(clap::Args)]
struct BrokerCli {
    #[command(subcommand)]
    action: Option<BrokerCommand>,
    #[command(flatten)]
    run: BrokerArgs,
}

/// `broker …`.
#[derive(Subcommand)]
enum BrokerCommand {
    /// Every runtime figure of each broker server, a line per key (mqadmin brokerStatus).
    #[command(after_help = EXIT_STATUS)]
    Status(ClusterArgs),
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
        use cli::{admin, manage};
        match self {
            Command::Produce(args) => cli::produce::produce(&args).await,
            Command::Consume(args) => cli::consume::consume(&args).await,
            Command::Topic(command) => match command {
                TopicCommand::Create(args) => manage::topic_create(&args).await,
                TopicCommand::Update(args) => manage::topic_update(&args).await,
                TopicCommand::Delete(args) => manage::topic_delete(&args).await,
                TopicCommand::List(args) => manage::topic_list(&args).await,
                TopicCommand::Status(args) => manage::topic_status(&args).await,
                TopicCommand::Route(args) => admin::topic_route(&args).await,
            },
            Command::Group(command) => match command {
                GroupCommand::List(args) => manage::group_list(&args).await,
                GroupCommand::Delete(args) => manage::group_delete(&args).await,
                GroupCommand::Progress(args) => admin::consumer_progress(&args).await,
                GroupCommand::Connections(args) => admin::consumer_connections(&args).await,
            },
            Command::Offset(OffsetCommand::Reset(args)) | Command::ResetOffset(args) => {
                admin::reset_offset(&args).await
            }
            Command::Cluster(ClusterCommand::List(args)) => manage::cluster_list(&args).await,
            Command::Broker(BrokerCli {
                action: Some(BrokerCommand::Status(args)),
                ..
            }) => manage::broker_status(&args).await,
            Command::Broker(BrokerCli { action: None, run }) => cli::embedded::broker(run).await,
            Command::QueryMsg(args) => admin::query_msg(&args).await,
            Command::Demo(args) => cli::embedded::demo(args).await,
            Command::Completions { shell } => {
                // Into a buffer first: clap_complete panics on a closed stdout (`| head`).
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut Cli::command(), "rocketmq-actor", &mut script);
                cli::write_stdout(&script)?;
                Ok(Outcome::Done)
            }
            Command::TopicRoute(args) => admin::topic_route(&args).await,
            Command::ConsumerProgress(args) => admin::consumer_progress(&args).await,
            Command::ConsumerConnections(args) => admin::consumer_connections(&args).await,
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

/// What is logged without RUST_LOG. `consume --count` holds back the listener calls past the
/// count on purpose, so a shutdown abandoning them (target `rocketmq_actor::shutdown`) is
/// expected, not a warning.
fn default_log_filter(quiet: bool) -> &'static str {
    if quiet {
        "error"
    } else {
        "warn,rocketmq_actor::shutdown=error"
    }
}

fn main() -> ExitCode {
    // Usage errors (and --help, --version) end here, with clap's exit status 2 (0).
    let mut cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(default_log_filter(cli.quiet))
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Command::Consume(args) = &mut cli.command {
        args.quiet = cli.quiet;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's arguments are consistent (no short flag used twice, no conflict
    /// naming a missing argument): clap checks it only when that subcommand is parsed.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
