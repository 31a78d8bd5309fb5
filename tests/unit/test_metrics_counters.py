from vllm_gammatune.telemetry.metrics import StepCounters


def test_counters_shared_between_writer_and_reader(tmp_path):
    owner = StepCounters.create(4)
    try:
        writer = StepCounters.attach(owner.path, 4)
        writer.record_step([1, 4, 4, 7], num_planned_draft_tokens=20,
                           num_confidence_stops=2, tracked_requests=3,
                           num_draft_forward_passes=7)
        writer.record_step([2], num_planned_draft_tokens=2, num_confidence_stops=0,
                           tracked_requests=1, num_catch_up_tokens=9)
        writer.record_step([], num_planned_draft_tokens=0, num_confidence_stops=0,
                           tracked_requests=1, num_skipped_draft_steps=1,
                           drafting_scale=0.6204)
        snap = owner.snapshot()
        assert snap["num_drafts"] == 5
        assert snap["num_draft_tokens"] == 1 + 4 + 4 + 7 + 2
        assert snap["num_planned_draft_tokens"] == 22
        assert snap["num_confidence_stops"] == 2
        assert snap["tracked_requests"] == 1
        assert snap["num_draft_forward_passes"] == 7
        assert snap["num_skipped_draft_steps"] == 1
        assert snap["num_catch_up_tokens"] == 9
        assert snap["num_steps"] == 3
        assert snap["drafting_scale_milli"] == 620  # a gauge: the last value
        # lengths above the cap land in the cap's bucket
        assert snap["draft_length_counts"] == [0, 1, 1, 0, 3]
        writer.remove()
    finally:
        owner.remove()
    import os
    assert not os.path.exists(owner.path)


def test_attach_refuses_a_file_of_another_layout():
    import pytest

    owner = StepCounters.create(4)
    try:
        with pytest.raises(ValueError, match="expects"):
            StepCounters.attach(owner.path, 8)
    finally:
        owner.remove()
