//! What every policy runs on: the manager's state, loads and result placement (`manager`), room
//! in the budget (`eviction`), room for an op's outputs before its kernel runs where the device's
//! allocator does not ask for it (`outputs`), reads, exports, pins and the drain (`outside`), one
//! storage's placement and its home (`storage`) and what libtorch knows of it (`torch_storage`,
//! with its C++), the views of device copies an op's inputs are (`op_views`), which storage a
//! tensor views (`homes`), the storages by id (`storage_table`), several storages over one memory
//! the outside can reach (`external`), one op's protocol (`ticket`) and the cache hints that start
//! it (`cache_lines`), ops on several threads waiting for room in the one budget (`room`),
//! counters, events and the timeline (`report`), and the maps keyed by ids (`id_map`).

pub(crate) mod cache_lines;
pub(super) mod external;
pub(super) mod homes;
pub(crate) mod id_map;
pub(super) mod eviction;
pub(super) mod manager;
pub(crate) mod op_views;
pub(super) mod picture;
pub(super) mod outputs;
pub(super) mod outside;
pub(super) mod report;
pub(super) mod room;
pub(super) mod storage;
pub(super) mod storage_table;
pub(crate) mod torch_storage;
pub(super) mod ticket;
