"""widgets.MappingExplorer (notebook 12): the buttons make the Trainer's options, Run trains
that mapping on the simulator and shows its profile, a mapping that cannot run says why."""
import numpy as np

from ipulab import data, devices, nn, widgets

POD = devices.pod(16, tiles_per_ipu=4)
X, Y, _, _ = data.sort_tokens(n_train=16, n_test=1, length=4)


def tiny_gpt():
    return nn.small_gpt(seq_len=8, d_model=32, nhead=2, dim_feedforward=64, num_layers=2)


def explorer(reference=None, global_batch=16):
    return widgets.MappingExplorer(tiny_gpt, POD, X, Y, global_batch, reference=reference,
                                   optimizer="adam", lr=3e-3, eps=1e-4)


def test_the_buttons_make_the_trainer_options_and_the_replicas_fill_the_pod():
    e = explorer()
    assert e.config() == dict(replicas=16, batch_size=1, tensor_parallel=1, rts=False,
                              phases=1)
    e.t.value, e.p.value, e.rts.value, e.phases.value = "2x2", "2", True, "2"
    assert e.config() == dict(replicas=2, batch_size=8, tensor_parallel="2x2", rts=True,
                              phases=2, pipeline=2, micro_batches=2)
    e.t.value, e.p.value = "4", "1"
    assert e.config()["tensor_parallel"] == 4 and e.config()["replicas"] == 4


def test_run_trains_the_mapping_and_compares_its_losses_with_the_reference():
    one = nn.Trainer(tiny_gpt(), devices.ipu("bow", tiles_per_ipu=16), optimizer="adam",
                     lr=3e-3, eps=1e-4, batch_size=16)
    one.fit(X, Y, shuffle=False)
    e = explorer(reference=one.history["loss"])
    e.t.value, e.rts.value = "2", True
    e.run.click()
    t = e.trainer
    assert t.config.tensor_parallel_ipus == 2 and t.replicas == 8 and t.config.rts
    profile = t.profile()
    assert f"{profile.total_cycles:,} cycles a step" in e.status.value
    assert "losses as the reference's" in e.status.value
    assert f"{profile.step_summary()['ipu_link_bytes']:,} B over the IPU-Links" in e.status.value
    assert len(e.plots.children) == 2
    assert np.allclose(t.history["loss"], one.history["loss"], rtol=2e-5)


def test_a_mapping_that_cannot_run_says_why_and_shows_nothing_else():
    e = explorer()
    e.t.value = "4"                    # 2 heads cannot be split over 4 IPUs
    e.run.click()
    assert e.trainer is None and e.plots.children == ()
    assert "tensor_parallel=4" in e.status.value and "heads" in e.status.value
    few = explorer(global_batch=8)      # 16 replicas cannot share 8 sequences
    few.run.click()
    assert few.trainer is None and "16 replicas cannot share a global batch of 8" in \
        few.status.value
