"""``biosig benchmark``: a grid of corpora x methods x seeds run on one shared queue, and its leaderboard."""
