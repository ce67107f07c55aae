"""`LineMatcher`: difflib's `SequenceMatcher(None, a, b, autojunk=...)` over lines, with the
same matching blocks found in near-linear time on long files.

difflib finds the longest block common to two ranges by visiting, for each line of the first
range, every occurrence of that line in the second sequence. A blank line or a `return x`
that a module repeats a thousand times makes that a million visits per range, and the ranges
are searched again at each level of its recursion: on a module of a few thousand sites that
search was most of the `--style global` run. The result feeds the line numbers of findings,
so it must stay difflib's, block for block.

Here a line found at most `RARE` times in the second sequence is rare. The longest common
block is looked for among the blocks that hold a rare line: each is extended from its first
rare line once. A block of popular lines only can be no longer than the longest run of
popular lines in the range; when the best block found is not longer than that run, difflib's
own search decides (it is then a short block, in a range small enough).

With `autojunk=True` (what `difflib.unified_diff` uses: migrator/diffing.py), the lines found
in more than 1% of a long second sequence are "popular" to difflib and left out of its search:
the block is searched among the other lines, then extended over equal lines on both sides, as
difflib extends it. On a generated module of thousands of sites its search still visits, for
each line, every one of up to 1% of the file's occurrences of it, in every range: quadratic.
"""

from __future__ import annotations

import bisect
import difflib

RARE = 32  # a line found at most this many times in the second sequence is rare


class LineMatcher(difflib.SequenceMatcher):
    """`difflib.SequenceMatcher(None, a, b, autojunk=autojunk)`, with a faster
    `find_longest_match` that returns the same block: the longest, and of those the one
    that starts first in `a`, then first in `b`."""

    def __init__(self, a: list[str], b: list[str], autojunk: bool = False):
        super().__init__(None, a, b, autojunk=autojunk)
        # 0 for a line not in b, and for one difflib found popular (left out of b2j).
        counts = [len(self.b2j.get(line, ())) for line in a]
        self._searched = [count > 0 for count in counts]
        self._rare = [0 < count <= RARE for count in counts]
        self._rare_at = [i for i, rare in enumerate(self._rare) if rare]
        # Runs of popular lines of `a` (found in b more than RARE times), as (start, end).
        self._runs: list[tuple[int, int]] = []
        start = None
        for i, count in enumerate([*counts, 0]):
            if count > RARE and start is None:
                start = i
            elif count <= RARE and start is not None:
                self._runs.append((start, i))
                start = None
        self._run_ends = [end for _, end in self._runs]

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi = len(self.a) if ahi is None else ahi
        bhi = len(self.b) if bhi is None else bhi
        a, b, b2j, rare, searched = self.a, self.b, self.b2j, self._rare, self._searched
        best = (0, -alo, -blo)  # (size, -start in a, -start in b): the largest wins
        first = bisect.bisect_left(self._rare_at, alo)
        for i in self._rare_at[first:bisect.bisect_left(self._rare_at, ahi, first)]:
            occurrences = b2j[a[i]]
            for j in occurrences[bisect.bisect_left(occurrences, blo):]:
                if j >= bhi:
                    break
                i0, j0 = i, j
                while i0 > alo and j0 > blo and searched[i0 - 1] and a[i0 - 1] == b[j0 - 1]:
                    if rare[i0 - 1]:
                        break  # the block holds an earlier rare line: found from there
                    i0, j0 = i0 - 1, j0 - 1
                else:
                    i1, j1 = i + 1, j + 1
                    while i1 < ahi and j1 < bhi and searched[i1] and a[i1] == b[j1]:
                        i1, j1 = i1 + 1, j1 + 1
                    best = max(best, (i1 - i0, -i0, -j0))
        size, i, j = best[0], -best[1], -best[2]
        if size <= self._longest_popular_run(alo, ahi):
            i, j, size = self._difflib_longest_match(alo, ahi, blo, bhi)
        # difflib's extension over equal lines its search left out (none without autojunk).
        while i > alo and j > blo and a[i - 1] == b[j - 1]:
            i, j, size = i - 1, j - 1, size + 1
        while i + size < ahi and j + size < bhi and a[i + size] == b[j + size]:
            size += 1
        return difflib.Match(i, j, size)

    def _longest_popular_run(self, alo: int, ahi: int) -> int:
        """The longest run of popular lines within a[alo:ahi]."""
        longest = 0
        for start, end in self._runs[bisect.bisect_right(self._run_ends, alo):]:
            if start >= ahi:
                break
            longest = max(longest, min(end, ahi) - max(start, alo))
        return longest

    def _difflib_longest_match(self, alo, ahi, blo, bhi):
        """difflib's search (no junk, so none of its junk extensions apply), reading only
        the occurrences inside b[blo:bhi]."""
        a, b2j = self.a, self.b2j
        besti, bestj, bestsize = alo, blo, 0
        j2len: dict[int, int] = {}
        for i in range(alo, ahi):
            get = j2len.get
            new: dict[int, int] = {}
            occurrences = b2j.get(a[i], ())
            for j in occurrences[bisect.bisect_left(occurrences, blo):]:
                if j >= bhi:
                    break
                k = new[j] = get(j - 1, 0) + 1
                if k > bestsize:
                    besti, bestj, bestsize = i - k + 1, j - k + 1, k
            j2len = new
        return difflib.Match(besti, bestj, bestsize)
