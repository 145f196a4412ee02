# ruff: noqa  (written in PARL 2.x's own style on purpose: super(Cls, self), str.format)
"""A DQN training script written the way PARL 2.x's torch examples are (module-level constants,
an agent with e-greedy, the old gym API through CompatWrapper), with ``import gym`` changed to
``import gymnasium as gym`` and nothing else. The test runs it for a tiny budget."""

import argparse

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import parl
from parl.algorithms import DQN
from parl.env import CompatWrapper
from parl.utils import ReplayMemory, logger

LEARN_FREQ = 5
MEMORY_SIZE = 200000
MEMORY_WARMUP_SIZE = 200
BATCH_SIZE = 64
LEARNING_RATE = 0.0005
GAMMA = 0.99


class CartpoleModel(parl.Model):
    def __init__(self, obs_dim, act_dim):
        super(CartpoleModel, self).__init__()
        self.fc1 = nn.Linear(obs_dim, 128)
        self.fc2 = nn.Linear(128, 128)
        self.fc3 = nn.Linear(128, act_dim)

    def forward(self, obs):
        h1 = F.relu(self.fc1(obs))
        h2 = F.relu(self.fc2(h1))
        return self.fc3(h2)


class CartpoleAgent(parl.Agent):
    def __init__(self, algorithm, act_dim, e_greed=0.1, e_greed_decrement=0):
        super(CartpoleAgent, self).__init__(algorithm)
        assert isinstance(act_dim, int)
        self.act_dim = act_dim
        self.global_step = 0
        self.update_target_steps = 200
        self.e_greed = e_greed
        self.e_greed_decrement = e_greed_decrement

    def sample(self, obs):
        if np.random.random() < self.e_greed:
            act = np.random.randint(self.act_dim)
        else:
            act = self.predict(obs)
        self.e_greed = max(0.01, self.e_greed - self.e_greed_decrement)
        return act

    def predict(self, obs):
        obs = torch.tensor(obs, dtype=torch.float32)
        pred_q = self.alg.predict(obs)
        return int(pred_q.argmax())

    def learn(self, obs, act, reward, next_obs, terminal):
        if self.global_step % self.update_target_steps == 0:
            self.alg.sync_target()
        self.global_step += 1
        act = np.expand_dims(act, axis=-1)
        reward = np.expand_dims(reward, axis=-1)
        terminal = np.expand_dims(terminal, axis=-1)
        obs = torch.tensor(obs, dtype=torch.float32)
        act = torch.tensor(act, dtype=torch.long)
        reward = torch.tensor(reward, dtype=torch.float32)
        next_obs = torch.tensor(next_obs, dtype=torch.float32)
        terminal = torch.tensor(terminal, dtype=torch.float32)
        loss = self.alg.learn(obs, act, reward, next_obs, terminal)
        return float(loss)


def run_train_episode(agent, env, rpm):
    total_reward = 0
    obs = env.reset()
    step = 0
    while True:
        step += 1
        action = agent.sample(obs)
        next_obs, reward, done, _ = env.step(action)
        rpm.append(obs, action, reward, next_obs, done)
        if (len(rpm) > MEMORY_WARMUP_SIZE) and (step % LEARN_FREQ == 0):
            batch = rpm.sample_batch(BATCH_SIZE)
            agent.learn(*batch)
        total_reward += reward
        obs = next_obs
        if done:
            break
    return total_reward


def run_evaluate_episodes(agent, env, eval_episodes=5):
    eval_reward = []
    for _ in range(eval_episodes):
        obs = env.reset()
        episode_reward = 0
        while True:
            obs, reward, done, _ = env.step(agent.predict(obs))
            episode_reward += reward
            if done:
                break
        eval_reward.append(episode_reward)
    return np.mean(eval_reward)


def main():
    env = CompatWrapper(gym.make("CartPole-v1"))
    env.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    obs_dim = env.observation_space.shape[0]
    act_dim = env.action_space.n
    logger.info("obs_dim {}, act_dim {}".format(obs_dim, act_dim))
    rpm = ReplayMemory(MEMORY_SIZE, obs_dim, 0)
    model = CartpoleModel(obs_dim=obs_dim, act_dim=act_dim)
    alg = DQN(model, gamma=GAMMA, lr=LEARNING_RATE)
    agent = CartpoleAgent(alg, act_dim=int(act_dim), e_greed=0.1, e_greed_decrement=1e-6)
    while len(rpm) < MEMORY_WARMUP_SIZE:
        run_train_episode(agent, env, rpm)
    episode = 0
    while episode < args.max_episode:
        for _ in range(10):
            run_train_episode(agent, env, rpm)
            episode += 1
        eval_reward = run_evaluate_episodes(agent, env)
        logger.info(
            "episode:{}    e_greed:{}   Test reward:{}".format(episode, agent.e_greed, eval_reward)
        )
    agent.save("./model.ckpt")
    print("final test reward", eval_reward)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_episode", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main()
