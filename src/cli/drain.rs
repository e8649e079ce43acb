//! `sqlcron drain [NODE] [--wait]` / `sqlcron undrain [NODE]`: a node stops (or resumes)
//! claiming; its runs finish. The flag lives in `cron_nodes.drain`, so it lasts across restarts.

use std::time::Duration;

use crate::store::Store;

use super::Failure;

pub async fn drain(store: &Store, node: &str, wait: bool) -> Result<u8, Failure> {
    set(store, node, true).await?;
    let running = store.running_on(node).await.map_err(Failure::runtime)?;
    println!("{node}: drained: claims nothing new; {running} run(s) still going");
    if wait {
        // A claim statement already running when the flag was written may still commit (every
        // later one reads the flag): only a count taken a second on can say the node is idle.
        let mut last = running;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let running = store.running_on(node).await.map_err(Failure::runtime)?;
            if running != last {
                println!("{node}: {running} run(s) still going");
                last = running;
            }
            if running == 0 {
                break;
            }
        }
        println!("{node}: idle");
    }
    Ok(0)
}

pub async fn undrain(store: &Store, node: &str) -> Result<u8, Failure> {
    set(store, node, false).await?;
    println!("{node}: claiming again");
    Ok(0)
}

async fn set(store: &Store, node: &str, drain: bool) -> Result<(), Failure> {
    let known = store
        .set_drain(node, drain, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?;
    if known {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "no node named \"{node}\" has registered (see sqlcron status)"
        )))
    }
}
