"""The release that drains itself: the backlog (planned cells without a published wheel), the
schedule that cuts it into runs within GitHub's limits, the batch one run builds, and the REST
calls that release it, paced and backed off (``python -m tools.release``)."""
