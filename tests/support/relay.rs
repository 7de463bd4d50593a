//! A loopback TCP relay in front of a server (TLS passes through untouched) that a test can
//! pause: every open connection is dropped at once, as when the server ends its watches, and new
//! ones are held, unanswered, until [`Relay::resume`].

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Relay {
    pub addr: SocketAddr,
    /// (connections' generation, paused): a connection of an older generation is dropped.
    state: watch::Sender<(u64, bool)>,
    _accepting: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Relays to `target` from a loopback port the kernel picks.
    pub async fn start(target: SocketAddr) -> Arc<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let addr = listener.local_addr().unwrap();
        let (state, _) = watch::channel((0, false));
        let states = state.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target, states.subscribe()));
            }
        });
        Arc::new(Relay { addr, state, _accepting: accepting })
    }

    /// Drops every open connection and holds new ones until [`Self::resume`].
    pub fn pause(&self) {
        self.state.send_modify(|(generation, paused)| {
            *generation += 1;
            *paused = true;
        });
    }

    pub fn resume(&self) {
        self.state.send_modify(|(_, paused)| *paused = false);
    }
}

async fn relay(mut client: TcpStream, target: SocketAddr, mut state: watch::Receiver<(u64, bool)>) {
    let Ok(generation) = state.wait_for(|(_, paused)| !paused).await.map(|resumed| resumed.0) else { return };
    let Ok(mut server) = TcpStream::connect(target).await else { return };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = state.wait_for(|(g, _)| *g != generation) => {}
    }
}
