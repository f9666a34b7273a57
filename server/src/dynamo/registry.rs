//! Engines registered through Dynamo's API: which instance and rank follow which endpoint, in
//! which routing partition (a model and a routing group).
//!
//! A partition is a model of the server: routing group `default` of model `M` is the model `M`
//! itself (so Dynamo's clients and this server's own `/query` share it), any other group `G` is
//! the model `M@G`. Rules as Dynamo's registry has them: an instance belongs to one partition, a
//! rank is registered once, a partition keeps the block size it was created with.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use flash_indexer::Worker;
use flash_indexer::ingest::DpRank;
use serde::Serialize;

use crate::config::EngineConfig;
use crate::service::{EngineError, Service};

/// Dynamo's routing group of requests that name none.
pub const DEFAULT_ROUTING_GROUP: &str = "default";

/// The server's model for Dynamo's partition `(model_name, routing_group)`.
pub fn partition_model(model_name: &str, routing_group: &str) -> String {
    if routing_group == DEFAULT_ROUTING_GROUP {
        model_name.to_owned()
    } else {
        format!("{model_name}@{routing_group}")
    }
}

/// Why a registration or an unregistration was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// The request contradicts what is registered (Dynamo answers 409).
    Conflict(String),
    /// The request is not usable (400).
    Invalid(String),
    /// Nothing registered matches (404).
    NotFound(String),
}

/// One registered rank of an instance.
#[derive(Clone, Debug)]
struct Rank {
    endpoint: String,
    /// The key its engine has in the [`Service`].
    engine: String,
}

/// One registered instance.
#[derive(Clone, Debug)]
struct Instance {
    model_name: String,
    routing_group: String,
    block_size: u32,
    ranks: BTreeMap<u32, Rank>,
}

/// A registration, as `POST /register` gives it.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The instance (the worker id of its events).
    pub instance_id: u64,
    /// Its event socket.
    pub endpoint: String,
    /// Its replay socket, if any.
    pub replay_endpoint: Option<String>,
    /// Its model.
    pub model_name: String,
    /// Its routing group.
    pub routing_group: String,
    /// Tokens per block of its model.
    pub block_size: u32,
    /// The rank of its events when their batches name none.
    pub dp_rank: u32,
}

/// A registered instance as `GET /workers` lists it (Dynamo's `WorkerInfo`).
#[derive(Debug, Serialize)]
pub struct WorkerInfo {
    instance_id: u64,
    source: &'static str,
    status: &'static str,
    model_name: String,
    routing_group: String,
    block_size: u32,
    endpoints: BTreeMap<u32, String>,
    listeners: BTreeMap<u32, ListenerInfo>,
}

/// One rank's subscription (Dynamo's `ListenerInfo`).
#[derive(Debug, Serialize)]
pub struct ListenerInfo {
    endpoint: String,
    /// `pending` until its engine has connected, then `active`.
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
}

/// The instances registered through Dynamo's API, over a [`Service`].
pub struct Registry {
    service: Arc<Service>,
    instances: Mutex<BTreeMap<u64, Instance>>,
}

impl Registry {
    /// An empty registry over `service`.
    pub fn new(service: Arc<Service>) -> Registry {
        Registry {
            service,
            instances: Mutex::default(),
        }
    }

    /// The service.
    pub fn service(&self) -> &Arc<Service> {
        &self.service
    }

    /// Follows `registration`'s endpoint into its partition. Blocks while the sockets are made.
    pub fn register(&self, registration: Registration) -> Result<(), RegistryError> {
        let Registration {
            instance_id,
            endpoint,
            replay_endpoint,
            model_name,
            routing_group,
            block_size,
            dp_rank,
        } = registration;
        if block_size == 0 || block_size as usize > flash_indexer::hash::MAX_BLOCK_SIZE {
            return Err(RegistryError::Invalid(format!(
                "block_size {block_size} (1 to {} are accepted)",
                flash_indexer::hash::MAX_BLOCK_SIZE
            )));
        }
        let model = partition_model(&model_name, &routing_group);
        let engine = EngineConfig {
            events: endpoint.clone(),
            replay: replay_endpoint,
            worker: Some(instance_id),
            dp_rank: Some(dp_rank),
            pod: None,
            model: Some(model.clone()),
        };
        engine
            .check()
            .map_err(|e| RegistryError::Invalid(e.to_string()))?;
        let mut instances = self.instances.lock().unwrap();
        if let Some(known) = instances.get(&instance_id) {
            if (&known.model_name, &known.routing_group) != (&model_name, &routing_group) {
                return Err(RegistryError::Conflict(format!(
                    "instance {instance_id} is already registered for model={} routing_group={}",
                    known.model_name, known.routing_group
                )));
            }
            if known.ranks.contains_key(&dp_rank) {
                return Err(RegistryError::Conflict(format!(
                    "instance {instance_id} dp_rank {dp_rank} already registered"
                )));
            }
        }
        let existing = self
            .service
            .model_or_create_sized(&model, Some(block_size as usize))
            .block_size;
        if existing != block_size as usize {
            return Err(RegistryError::Conflict(format!(
                "block_size mismatch for model={model_name} routing_group={routing_group}: existing={existing}, requested={block_size}"
            )));
        }
        let key = engine.key();
        let added = self
            .service
            .add_engine_ranked(engine, false, DpRank::FromBatchOr(dp_rank));
        if let Err(error) = added {
            // A refused registration leaves nothing behind, not even a new empty partition.
            self.service.remove_model_if_unused(&model);
            return Err(match error {
                EngineError::Exists(_) => RegistryError::Conflict(error.to_string()),
                EngineError::Invalid(_) => RegistryError::Invalid(error.to_string()),
            });
        }
        let instance = instances.entry(instance_id).or_insert_with(|| Instance {
            model_name,
            routing_group,
            block_size,
            ranks: BTreeMap::new(),
        });
        instance.ranks.insert(
            dp_rank,
            Rank {
                endpoint,
                engine: key,
            },
        );
        Ok(())
    }

    /// Stops following `instance_id` and drops its blocks: one rank, every rank of one routing
    /// group, or (without a group) the instance in whichever group of `model_name` it is.
    /// Blocks while the subscriptions stop.
    pub fn unregister(
        &self,
        instance_id: u64,
        model_name: &str,
        routing_group: Option<&str>,
        dp_rank: Option<u32>,
    ) -> Result<(), RegistryError> {
        let mut instances = self.instances.lock().unwrap();
        let Some(known) = instances.get_mut(&instance_id) else {
            return Err(RegistryError::NotFound(format!(
                "instance {instance_id} not found"
            )));
        };
        let same_group = routing_group.is_none_or(|group| group == known.routing_group);
        if known.model_name != model_name || !same_group {
            return Err(RegistryError::NotFound(format!(
                "instance {instance_id} is registered for model={} routing_group={}",
                known.model_name, known.routing_group
            )));
        }
        let model = partition_model(&known.model_name, &known.routing_group);
        match dp_rank.filter(|_| routing_group.is_some()) {
            Some(rank) => {
                let Some(registered) = known.ranks.remove(&rank) else {
                    return Err(RegistryError::NotFound(format!(
                        "instance {instance_id} dp_rank {rank} not found"
                    )));
                };
                self.service.stop_engine(&registered.engine);
                self.service
                    .remove_worker_dp_rank(Worker::new(instance_id, rank));
                if known.ranks.is_empty() {
                    instances.remove(&instance_id);
                }
            }
            None => {
                instances.remove(&instance_id);
                self.service.remove_worker(instance_id);
            }
        }
        self.service.remove_model_if_unused(&model);
        Ok(())
    }

    /// The registered instances, filtered by model and routing group when given.
    pub fn list(&self, model_name: Option<&str>, routing_group: Option<&str>) -> Vec<WorkerInfo> {
        let engines: BTreeMap<String, (bool, Option<String>)> = (self.service.engines())
            .into_iter()
            .map(|engine| {
                let connected = engine.tiers.iter().all(|t| t.stats.connected > 0);
                let problem = engine.tiers.iter().find_map(|t| t.last_problem.clone());
                (engine.key, (connected, problem))
            })
            .collect();
        let instances = self.instances.lock().unwrap();
        instances
            .iter()
            .filter(|(_, i)| model_name.is_none_or(|m| i.model_name == m))
            .filter(|(_, i)| routing_group.is_none_or(|g| i.routing_group == g))
            .map(|(&id, instance)| {
                let listeners: BTreeMap<u32, ListenerInfo> = (instance.ranks.iter())
                    .map(|(&rank, registered)| {
                        let (connected, last_error) =
                            engines.get(&registered.engine).cloned().unwrap_or_default();
                        let status = if connected { "active" } else { "pending" };
                        let info = ListenerInfo {
                            endpoint: registered.endpoint.clone(),
                            status,
                            last_error,
                        };
                        (rank, info)
                    })
                    .collect();
                // Dynamo's aggregate: pending while any rank is, else active.
                let status = if listeners.values().any(|l| l.status == "pending") {
                    "pending"
                } else {
                    "active"
                };
                WorkerInfo {
                    instance_id: id,
                    source: "zmq",
                    status,
                    model_name: instance.model_name.clone(),
                    routing_group: instance.routing_group.clone(),
                    block_size: instance.block_size,
                    endpoints: (instance.ranks.iter())
                        .map(|(&rank, r)| (rank, r.endpoint.clone()))
                        .collect(),
                    listeners,
                }
            })
            .collect()
    }
}
