"""The driver's process: Ray, never TensorFlow. Connects to Ray, reserves the placement group, starts the task
group, runs the event loop and its sinks (progress, TensorBoard), and decides retries. Imports one task-side
module, the actor class Ray needs (`_task.actor`)."""
