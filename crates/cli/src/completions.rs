//! `dqplb completions SHELL` and `dqplb man`: the shell completion script and the roff manual page,
//! both generated from the clap command line (clap_complete, clap_mangen).

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Options of `dqplb completions`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}

/// Prints the completion script on stdout; returns the exit code.
pub(crate) fn completions(a: &CompletionsArgs) -> i32 {
    let mut cmd = Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "dqplb", &mut std::io::stdout());
    0
}

/// Prints the manual page (roff) on stdout; returns the exit code (1 if stdout fails).
pub(crate) fn man() -> i32 {
    match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dqplb man: {e}");
            1
        }
    }
}
