"""The neighbour-search benchmark runs, and compares every backend against scipy in one run."""

import pytest


def test_scipy_only(load_script):
    report = load_script("neighbors").main(["--nodes", "400", "--repeat", "1", "--threads", "1",
                                            "--backends", "scipy", "--parts", "4"])
    assert set(report["backends"]) == {"scipy"}
    assert report["radius_graph_edges"] > 400 and report["metis_partition_knn_graph_s"] > 0


def test_a_device_backend_is_compared_with_scipy(load_script, fake_device_search):
    report = load_script("neighbors").main(["--nodes", "300", "--repeat", "1", "--threads", "1",
                                            "--backends", "scipy", "torch-cluster", "--no-partitions"])
    entry = report["backends"]["torch-cluster"]
    assert entry["same_graphs_as_scipy"] is True
    assert set(entry["speedup_over_scipy"]) == {"radius_graph_s", "radius_bipartite_half_s", "knn_graph_16_s"}
    assert "rcb_partition_s" not in report


def test_unknown_backend_is_refused(load_script):
    with pytest.raises(ValueError, match="unknown neighbour-search backend"):
        load_script("neighbors").main(["--nodes", "100", "--backends", "faiss", "--no-partitions"])
