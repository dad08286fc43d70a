"""The C API through ctypes (examples/python/ctypes_verify.py over libspecverify.so) gives the
Python module's tokens, counts and statistics bit for bit, and its error message."""
import importlib.util
import os
import pathlib

import numpy as np
import pytest

import specverify as sv
from conftest import Chains

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = os.environ.get("SPECVERIFY_C_LIBRARY")
pytestmark = pytest.mark.skipif(not LIBRARY, reason="SPECVERIFY_C_LIBRARY (the built libspecverify.so) not set")


@pytest.fixture(scope="module")
def capi():
    spec = importlib.util.spec_from_file_location("ctypes_verify", ROOT / "examples" / "python" / "ctypes_verify.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, module.load(LIBRARY)


def module_verify(chains, seed, offset, rule):
    out = sv.ChainOutput(tokens=np.full((chains.B, chains.K + 1), -1, np.int32),
                         num_accepted=np.zeros(chains.B, np.int32))
    batch = sv.ChainBatch(draft_offsets=chains.offsets, draft_tokens=chains.tokens, target_probs=chains.p,
                          draft_probs=chains.q)
    stats = sv.verify(rule, batch, sv.Randomness(seed=seed, offset=offset), out)
    return out.tokens, out.num_accepted, stats


@pytest.mark.parametrize("one_hot", [False, True])
def test_ctypes_matches_module(capi, one_hot):
    module, lib = capi
    rng = np.random.default_rng(11)
    for step in range(20):
        chains = Chains(rng.integers(0, 6, size=5), 64, rng, one_hot=one_hot)
        tokens, accepted, stats = module.verify_chains(lib, chains.offsets, chains.tokens, chains.p, chains.q,
                                                       seed=3, offset=step)
        want_tokens, want_accepted, want = module_verify(chains, 3, step, sv.Standard())
        np.testing.assert_array_equal(tokens, want_tokens)
        np.testing.assert_array_equal(accepted, want_accepted)
        assert (stats.drafted, stats.accepted, stats.target_checked) == (want.drafted, want.accepted,
                                                                        want.target_checked)


def test_ctypes_greedy_and_seed_matter(capi):
    """The rule kind and the seed reach the library: the negative controls of the test above."""
    module, lib = capi
    rng = np.random.default_rng(5)
    chains = Chains([6] * 8, 32, rng)
    seen = {module.verify_chains(lib, chains.offsets, chains.tokens, chains.p, chains.q, seed=s, offset=0)[0].tobytes()
            for s in range(4)}
    assert len(seen) > 1
    tokens, _, _ = module.verify_chains(lib, chains.offsets, chains.tokens, chains.p, chains.q, seed=0, offset=0,
                                        rule=1)  # SV_GREEDY
    np.testing.assert_array_equal(tokens, module_verify(chains, 0, 0, sv.Greedy())[0])


def test_ctypes_invalid_input_message(capi):
    module, lib = capi
    rng = np.random.default_rng(2)
    chains = Chains([3, 2], 16, rng)
    chains.tokens[1] = 99  # outside [0, V)
    with pytest.raises(ValueError) as from_c:
        module.verify_chains(lib, chains.offsets, chains.tokens, chains.p, chains.q, seed=0, offset=0)
    with pytest.raises(sv.InvalidInput) as from_module:
        module_verify(chains, 0, 0, sv.Standard())
    assert str(from_c.value) == str(from_module.value)


def test_ctypes_example_runs(capi):
    module, lib = capi
    module.main.__globals__["sys"].argv = ["ctypes_verify.py", LIBRARY]
    module.main()
