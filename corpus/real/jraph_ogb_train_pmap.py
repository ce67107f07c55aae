"""Modelled on jraph's multi-device OGB example (jraph/ogb_examples/train_pmap.py): a graph
classifier trained with one padded graph batch per device.

Source: github.com/google-deepmind/jraph, jraph/ogb_examples/train_pmap.py at commit
0eca7f27332f59104bcec5c678b92f8a8216ab42 (2022-05-31; the file's only version). jraph,
haiku, optax and the OGB reader are not used: graphs are a small NamedTuple with
`segment_sum` message passing in plain jax.numpy, the "transformed" network is a NamedTuple
of init/apply functions, Adam is hand-written, and the molecules are seeded random graphs.
All code here is written anew.

pmap features kept:
- params placed by `jax.device_put_replicated(params, list(jax.devices()))`, then the
  optimiser state built on every device by an inline `jax.pmap(opt_init)(params)`;
- the update step is a nested def inside `train()`, decorated with
  `@functools.partial(jax.pmap, axis_name="device")`, closing over a
  `functools.partial(compute_loss, net=net)` and the optimiser's update function;
  `lax.pmean` of the grads; it returns (loss, acc, opt_state, params), fed back each step;
- per-device batches built on the host by stacking one padded graph batch per device with
  `tree_map(lambda *x: jnp.stack(x, axis=0), *batch)`, a fresh generator over a shared
  reader for every step (`next(device_batch(reader))`), the labels read out of the stacked
  globals;
- "checkpoint": the replicated params are pickled and unpickled (host numpy with the
  device axis), then evaluated by `jax.pmap(functools.partial(compute_loss, net=net))`
  over every batch, summing loss and accuracy with `jnp.sum` on the host side and counting
  the real graphs with a `jax.vmap` over the device axis of the batch.

Scaled down: 2 real graphs of 3-6 nodes plus one padding graph per device batch (16 node
and 32 edge slots), 16 hidden units, 8 training steps, 2 evaluation batches. The original
needs jax 0.4.38: `jax.device_put_replicated` is gone from jax 0.10 (the migrated program
is what runs there).
"""
import functools
import pickle
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NODE_SLOTS = 16
EDGE_SLOTS = 32
GRAPHS_PER_BATCH = 3  # the last one is padding
NODE_FEATURES = 4
EDGE_FEATURES = 2
HIDDEN = 16


class Graphs(NamedTuple):
    nodes: Any
    edges: Any
    senders: Any
    receivers: Any
    n_node: Any
    n_edge: Any
    globals: Any


class Transformed(NamedTuple):
    init: Callable
    apply: Callable


def _dense(key, fan_in, fan_out):
    return {"w": jax.random.normal(key, (fan_in, fan_out)) / np.sqrt(fan_in),
            "b": jnp.zeros((fan_out,))}


def _linear(p, x):
    return x @ p["w"] + p["b"]


def _net_init(key, graph):
    del graph
    keys = jax.random.split(key, 5)
    return {
        "embed_nodes": _dense(keys[0], NODE_FEATURES, HIDDEN),
        "embed_edges": _dense(keys[1], EDGE_FEATURES, HIDDEN),
        "edge_update": _dense(keys[2], 3 * HIDDEN, HIDDEN),
        "node_update": _dense(keys[3], 2 * HIDDEN, HIDDEN),
        "readout": _dense(keys[4], HIDDEN, 2),
    }


def _net_apply(params, graph):
    nodes = jax.nn.relu(_linear(params["embed_nodes"], graph.nodes))
    edges = jax.nn.relu(_linear(params["embed_edges"], graph.edges))
    edges = jax.nn.relu(_linear(
        params["edge_update"],
        jnp.concatenate([edges, nodes[graph.senders], nodes[graph.receivers]], axis=-1)))
    incoming = jax.ops.segment_sum(edges, graph.receivers, num_segments=nodes.shape[0])
    nodes = jax.nn.relu(_linear(params["node_update"], jnp.concatenate([nodes, incoming], -1)))
    graph_of_node = jnp.repeat(jnp.arange(graph.n_node.shape[0]), graph.n_node,
                               total_repeat_length=nodes.shape[0])
    pooled = jax.ops.segment_sum(nodes, graph_of_node, num_segments=graph.n_node.shape[0])
    pooled = pooled / jnp.maximum(graph.n_node, 1)[:, None]
    return graph._replace(globals=_linear(params["readout"], pooled))


def padding_mask(graph):
    return jnp.arange(graph.n_node.shape[0]) < graph.n_node.shape[0] - 1


def count_padding_graphs(graph):
    return jnp.sum(~padding_mask(graph))


def compute_loss(params, graph, label, net):
    logits = net.apply(params, graph).globals
    log_probs = jax.nn.log_softmax(logits)
    targets = jax.nn.one_hot(label, 2)
    mask = padding_mask(graph)
    loss = -jnp.mean(log_probs * targets * mask[:, None])
    accuracy = jnp.sum((jnp.argmax(logits, axis=1) == label) * mask) / jnp.sum(mask)
    return loss, accuracy


def adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    def init(params):
        return {"m": jax.tree_util.tree_map(jnp.zeros_like, params),
                "v": jax.tree_util.tree_map(jnp.zeros_like, params),
                "t": jnp.zeros((), jnp.int32)}

    def update(grads, state, params):
        del params
        t = state["t"] + 1
        m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda a, g: b2 * a + (1 - b2) * g * g, state["v"], grads)
        scale = jnp.sqrt(1 - b2 ** t.astype(jnp.float32)) / (1 - b1 ** t.astype(jnp.float32))
        updates = jax.tree_util.tree_map(
            lambda a, b: -learning_rate * scale * a / (jnp.sqrt(b) + eps), m, v)
        return updates, {"m": m, "v": v, "t": t}

    return init, update


def random_molecule(rng):
    count = rng.randint(3, 7)
    nodes = rng.normal(size=(count, NODE_FEATURES)).astype(np.float32)
    senders = np.concatenate([np.arange(count), (np.arange(count) + 1) % count])
    receivers = np.concatenate([(np.arange(count) + 1) % count, np.arange(count)])
    edges = rng.normal(size=(senders.shape[0], EDGE_FEATURES)).astype(np.float32)
    label = int(nodes[:, 0].sum() + 0.5 * nodes[:, 1].mean() > 0)
    return nodes, edges, senders, receivers, label


def pad_batch(molecules):
    nodes = np.zeros((NODE_SLOTS, NODE_FEATURES), np.float32)
    edges = np.zeros((EDGE_SLOTS, EDGE_FEATURES), np.float32)
    senders = np.zeros(EDGE_SLOTS, np.int32)
    receivers = np.zeros(EDGE_SLOTS, np.int32)
    n_node, n_edge, labels = [], [], []
    node_at, edge_at = 0, 0
    for m_nodes, m_edges, m_send, m_recv, label in molecules:
        nodes[node_at:node_at + len(m_nodes)] = m_nodes
        edges[edge_at:edge_at + len(m_edges)] = m_edges
        senders[edge_at:edge_at + len(m_send)] = m_send + node_at
        receivers[edge_at:edge_at + len(m_recv)] = m_recv + node_at
        n_node.append(len(m_nodes))
        n_edge.append(len(m_edges))
        labels.append(label)
        node_at += len(m_nodes)
        edge_at += len(m_edges)
    # the padding graph takes the unused slots; its edges point at its first node
    senders[edge_at:] = node_at
    receivers[edge_at:] = node_at
    n_node.append(NODE_SLOTS - node_at)
    n_edge.append(EDGE_SLOTS - edge_at)
    labels.append(0)
    return Graphs(nodes, edges, senders, receivers, np.asarray(n_node, np.int32),
                  np.asarray(n_edge, np.int32), {"label": np.asarray(labels, np.int32)})


def make_reader(seed, repeat):
    rng = np.random.RandomState(seed)
    batches = [pad_batch([random_molecule(rng) for _ in range(GRAPHS_PER_BATCH - 1)])
               for _ in range(16)]
    if not repeat:
        return iter(batches)

    def forever():
        while True:
            yield from batches

    return forever()


def device_batch(graph_reader):
    num_devices = jax.local_device_count()
    batch = []
    for idx, graph in enumerate(graph_reader):
        batch.append(graph)
        if idx % num_devices == num_devices - 1:
            yield jax.tree_util.tree_map(lambda *x: jnp.stack(x, axis=0), *batch)
            batch = []


def train(num_training_steps):
    reader = make_reader(11, repeat=True)
    net = Transformed(_net_init, _net_apply)
    graph = pad_batch([random_molecule(np.random.RandomState(0))])
    params = net.init(jax.random.PRNGKey(42), graph)
    params = jax.device_put_replicated(params, list(jax.devices()))
    opt_init, opt_update = adam(3e-3)
    opt_state = jax.pmap(opt_init)(params)

    compute_loss_fn = functools.partial(compute_loss, net=net)

    @functools.partial(jax.pmap, axis_name="device")
    def update_fn(params, graph, label, opt_state):
        (loss, acc), grad = jax.value_and_grad(compute_loss_fn, has_aux=True)(
            params, graph, label)
        grad = jax.lax.pmean(grad, axis_name="device")
        updates, opt_state = opt_update(grad, opt_state, params)
        params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
        return loss, acc, opt_state, params

    losses = []
    for _ in range(num_training_steps):
        graph_batch = next(device_batch(reader))
        label = graph_batch.globals["label"]
        loss, acc, opt_state, params = update_fn(params, graph_batch, label, opt_state)
        losses.append(loss)
    return pickle.dumps(params), losses, acc


def evaluate(saved):
    reader = make_reader(12, repeat=False)
    net = Transformed(_net_init, _net_apply)
    params = pickle.loads(saved)
    accumulated_loss = 0
    accumulated_accuracy = 0
    idx = 0
    compute_loss_fn = jax.pmap(functools.partial(compute_loss, net=net))
    for graph_batch in device_batch(reader):
        label = graph_batch.globals["label"]
        loss, acc = compute_loss_fn(params, graph_batch, label)
        accumulated_accuracy += jnp.sum(acc)
        accumulated_loss += jnp.sum(loss)
        padding = jnp.sum(jax.vmap(count_padding_graphs)(graph_batch))
        idx += graph_batch.n_node.size - padding
    return accumulated_loss / idx, accumulated_accuracy / idx, idx


def run():
    saved, losses, last_acc = train(8)
    loss, accuracy, graphs = evaluate(saved)
    params = pickle.loads(saved)
    return {
        "train_losses": np.stack([np.asarray(x) for x in losses]),
        "last_train_acc": np.asarray(last_acc),
        "eval_loss": np.asarray(loss),
        "eval_accuracy": np.asarray(accuracy),
        "eval_graphs": np.asarray(graphs),
        "readout_w": np.asarray(params["readout"]["w"]),
    }
