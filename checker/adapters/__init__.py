"""Built-in candidate kinds: modules that compute the stage protocol with a third-party trainer's
own code, so that `grpo-check` checks that trainer like any from-scratch candidate."""
