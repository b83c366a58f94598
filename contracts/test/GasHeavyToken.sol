// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {TextRevertToken} from "./TextRevertToken.sol";

/// @title GasHeavyToken
/// @notice Test token whose transfers grow dearer once `setExtraWrites` is called, as a
///         proxied stablecoin's can after an upgrade (USDC and USDT on Celo and Base are
///         proxies): each transferFrom then writes that many fresh storage slots. Used to
///         prove the service tells a pull that ran out of gas (its own estimate fell short)
///         from one its payer made revert.
contract GasHeavyToken is TextRevertToken {
    uint256 public extraWrites;
    uint256 private written;
    mapping(uint256 => uint256) private ballast;

    function setExtraWrites(uint256 n) external {
        extraWrites = n;
    }

    function transferFrom(address from, address to, uint256 amount) public override returns (bool) {
        for (uint256 i = 0; i < extraWrites; i++) ballast[written++] = 1;
        return super.transferFrom(from, to, amount);
    }
}
