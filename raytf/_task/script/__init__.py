"""Script mode: an unmodified tf.distribute program run as a child process of the task's actor (`host`), the
child's bootstrap (`child`) and its reporter on the events pipe (`reporter`)."""
