"""Pairwise mode: which node pairs to measure, and which measured pairs are slow. No PyTorch.

A *node* is a distinct host name (``rocmlab.torchjob.distenv.host_name()``); its ranks are every
process on it. A pair is measured with all ranks of both nodes, so every NIC/GPU path between them
carries traffic, as in training.

Which pairs: every pair when there are at most ``max_pairs`` (n(n-1)/2 of them), else the first
``max_pairs`` pairs of a round-robin schedule (circle method) over the nodes in a seeded random
order. Each round of that schedule pairs every node once, so a sample covers the nodes evenly:
each node meets about 2·max_pairs/n partners, none is left out while others are measured twice.

Which pairs are slow: bus bandwidth below ``fraction`` x the reference, where the reference is the
median, over the nodes, of each node's best pair. A plain median over pairs fails with few nodes:
with three nodes and one slow one, two of the three pairs are slow and the median is a slow pair.
A node's best pair is slow only when the node itself is, so the median of best pairs is a fast
figure while fewer than half the nodes are slow. A node with at least two measured pairs that are
all slow is a *suspect host*: the common end of its slow links. Two nodes give one pair, which
cannot be slow relative to itself.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    """One host and the global ranks running on it."""

    host: str
    ranks: tuple[int, ...]


def nodes_from_hosts(hosts: Sequence[str]) -> list[Node]:
    """Group ranks by host name (``hosts[rank]``); nodes in the order of their lowest rank."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    return [Node(host, tuple(ranks)) for host, ranks in by_host.items()]


def round_robin(order: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Rounds of the circle method: a round pairs each item once; all rounds, each pair once."""
    items: list[int | None] = list(order)
    if len(items) % 2:
        items.append(None)  # the item drawn against None sits the round out
    count = len(items)
    rounds = []
    for _unused in range(count - 1):
        pairs = []
        for i in range(count // 2):
            a, b = items[i], items[count - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(pairs)
        items = [items[0], items[-1], *items[1:-1]]  # keep the first, rotate the rest
    return rounds


def plan_pairs(node_count: int, max_pairs: int, seed: int) -> tuple[list[tuple[int, int]], bool]:
    """The node-index pairs to measure, in order, and whether they are a sample of all pairs."""
    if max_pairs < 1:
        raise ValueError(f"max_pairs {max_pairs}: expected at least 1")
    total = node_count * (node_count - 1) // 2
    if total <= max_pairs:
        return [(a, b) for a in range(node_count) for b in range(a + 1, node_count)], False
    order = list(range(node_count))
    random.Random(seed).shuffle(order)
    chosen = [pair for pairs in round_robin(order) for pair in pairs]
    return chosen[:max_pairs], True


@dataclass(frozen=True)
class SlowVerdict:
    """Reference bandwidth, median over pairs, slow pair indices, suspect hosts."""

    reference_busbw: float | None
    median_busbw: float | None
    slow: tuple[int, ...]
    suspects: tuple[str, ...]


def flag_slow(
    pair_hosts: Sequence[tuple[str, str]], busbw: Sequence[float], fraction: float
) -> SlowVerdict:
    """Flag pairs with bus bandwidth below ``fraction`` x the median of each node's best pair."""
    if len(pair_hosts) != len(busbw):
        raise ValueError("one bandwidth per pair expected")
    if not busbw:
        return SlowVerdict(None, None, (), ())
    best: dict[str, float] = {}
    for (a, b), value in zip(pair_hosts, busbw, strict=True):
        for host in (a, b):
            best[host] = max(best.get(host, value), value)
    reference = statistics.median(best.values())
    slow = tuple(i for i, value in enumerate(busbw) if value < fraction * reference)
    pairs_of: dict[str, list[int]] = {}
    for i, (a, b) in enumerate(pair_hosts):
        pairs_of.setdefault(a, []).append(i)
        pairs_of.setdefault(b, []).append(i)
    suspects = tuple(
        host
        for host, indices in pairs_of.items()
        if len(indices) >= 2 and all(i in slow for i in indices)
    )
    return SlowVerdict(reference, statistics.median(busbw), slow, suspects)
