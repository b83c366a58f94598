// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @title Multicall3
/// @notice The subset of the canonical Multicall3 interface that viem and the x402
///         facilitator use, for local chains that lack the real one. Its runtime code is
///         placed at the canonical address 0xcA11bde05977b3631167028862bE2a173976CA11
///         (hardhat_setCode), so clients find it where they find it on Celo and Base.
contract Multicall3 {
    struct Call {
        address target;
        bytes callData;
    }

    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    error CallFailed(uint256 index);

    /// @notice Every call must succeed.
    function aggregate(Call[] calldata calls) external payable returns (uint256 blockNumber, bytes[] memory returnData) {
        blockNumber = block.number;
        returnData = new bytes[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool ok, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (!ok) revert CallFailed(i);
            returnData[i] = data;
        }
    }

    /// @notice Each call states whether it may fail; results carry success and return data.
    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory results) {
        results = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool ok, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (!ok && !calls[i].allowFailure) revert CallFailed(i);
            results[i] = Result(ok, data);
        }
    }

    /// @notice Every call, with its success and return data; a failed call reverts the whole
    ///         only when `requireSuccess`. The x402 facilitator (its exact scheme) reads through it (its
    ///         Permit2 checks: the payer's balance and allowance, the proxy's PERMIT2).
    function tryAggregate(bool requireSuccess, Call[] calldata calls) external payable returns (Result[] memory results) {
        results = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool ok, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (!ok && requireSuccess) revert CallFailed(i);
            results[i] = Result(ok, data);
        }
    }

    function getBlockNumber() external view returns (uint256) {
        return block.number;
    }

    function getCurrentBlockTimestamp() external view returns (uint256) {
        return block.timestamp;
    }

    function getEthBalance(address account) external view returns (uint256) {
        return account.balance;
    }

    function getChainId() external view returns (uint256) {
        return block.chainid;
    }
}
